"""Replay's comparison of the checks: the ones verify ran after an applied patch (and the routers after it), the
ones watch queued at its start and the ones it ran during the load."""

from __future__ import annotations

from agent import graph
from agent.checks import ADVISORY
from agent.codec import check_from_dict
from agent.decisions import kept
from agent.nodes.patching import queue_checks
from agent.nodes.watch import environment_checks
from agent.patch_payloads import PatchData as PatchEvent
from agent.patch_records import CandidateData, CheckResult
from agent.payloads import ChecksQueuedData, data_of
from agent.readers.replay_core import ReplayCore
from agent.readers.replay_events import NODE_OF, diff_files, until, verify_run
from agent.readers.tracefile import Event
from agent.state import SessionState


class CheckSteps(ReplayCore):
    """The steps of a replay that compare checks; ``_Replay`` adds the others."""

    def applied(self, ev: Event, rest: list[Event]) -> None:
        s, d = self.state, data_of(ev.data, PatchEvent)
        pid, recorded = str(d.get("patch_id")), s.get("proposal")
        if recorded is None or recorded["patch"].get("id") != pid:  # an approve-mode edit: the diff changed
            recorded = {"patch": {"id": pid}, "origin": d.get("origin") or "", "rationale": "", "evidence": [],
                        "checks": recorded["checks"] if recorded else []}
        proposal: CandidateData = {**recorded, "patch": {**recorded["patch"], "id": pid,
                                                         "files": diff_files(str(d.get("diff") or ""))}}
        self.take(kept(s, proposal))
        self.expect(ev, "after_apply", graph.after_apply(s), rest)
        checks = [check_from_dict(c) for c in proposal["checks"]]
        before = [c.describe() for c in checks if c.when != "during_load"]
        ran_events = verify_run(until(rest, *NODE_OF))
        ran_results = [data_of(e.data, CheckResult) for e in ran_events]  # the verify node recorded these
        ran = [r.get("check") for r in ran_results]
        # verify stops at the first failed check, so fewer checks are right only after a failure
        stopped = bool(ran_results) and not ran_results[-1].get("ok")
        self.compared += 1
        if ran != before[: len(ran)] or (len(ran) < len(before) and not stopped):
            self.differ(ev, f"verify would run {before}; the trace shows {ran}")
        if not stopped:  # verify queues the during-load checks only when every check so far passed
            s["pending_checks"] = queue_checks(s.get("pending_checks", []), list(proposal["checks"]),
                                               str(d.get("patch_id")))
        s["verifications"] = [*s.get("verifications", []), *ran_results]  # verify's own update
        after: SessionState = s
        self.now = ran_events[-1].ts if ran_events else ev.ts
        chosen = graph.after_verify(after, self.deps)
        if chosen == "budget_stop":  # the node's own effect: the outcome the exit event must show
            spent = graph.budget_stop(s, self.deps)
            if spent:
                s["outcome"], s["outcome_detail"] = spent["outcome"], spent["outcome_detail"]
        self.expect(ev, "after_verify", chosen, rest[len(until(rest, *NODE_OF)):])

    def queue_watch(self) -> None:
        """What watch queues at its start: the checks verify left (the state keeps them until the run ends), then
        the host's own."""
        s = self.state
        self.watch_pending = [check_from_dict(c).describe() for c in s.get("pending_checks") or []]
        self.env_expected = [c.describe() for c in environment_checks(s, self.deps)]
        self.watch_results = []

    def checks_queued(self, ev: Event) -> None:
        """watch starts (again, after a resume): its queue is the checkpoint's, whatever ran before the stop."""
        self.queue_watch()
        expected = [*self.watch_pending, *self.env_expected]
        queued = list(data_of(ev.data, ChecksQueuedData).get("checks") or [])
        self.compared += 1
        if queued != expected:
            self.differ(ev, f"watch would queue {expected}; the trace shows {queued}")

    def check(self, ev: Event) -> None:
        d = data_of(ev.data, CheckResult)
        if ev.node != "watch":  # verify's results join the state in applied(); validate's own check is a fact
            return
        self.watch_results.append(d)
        if str(d.get("check", "")).split(" ", 1)[0] in ADVISORY:  # the host's own checks (traces since they exist)
            expected_env = self.env_expected.pop(0) if self.env_expected else None
            self.compared += 1
            if expected_env != d.get("check"):
                self.differ(ev, f"watch would check {expected_env or 'nothing more'} on the host; the trace shows "
                                f"{d.get('check')!r}")
            return
        expected = self.watch_pending.pop(0) if self.watch_pending else None  # what verify left, in order
        self.compared += 1
        if expected != d.get("check"):
            self.differ(ev, f"watch would run {expected or 'no check'} during the load; the trace shows "
                            f"{d.get('check')!r}")
