"""Replay: today's decision logic against a recorded session, with no host and no LLM.

What it re-executes, event by event, on a graph state rebuilt from the trace:

- the routers of agent/graph.py — after_watch at every run_end, after_diagnose at every fault, after_repair
  at every candidate / no_repair, after_apply, after_verify (with the budgets of the recorded config and the
  event's own timestamp as the clock), after_validate — and compares the node each picks with the node the
  trace shows ran next (the next decisive event: fault → diagnose, candidate → repair, launch → launch, …);
- diagnose's "same fault again" test (fingerprint equal to the previous fault's) against the recorded flag;
- verify's split of a candidate's checks: today's Check.describe() of its "before" checks must be the checks
  the trace shows verify ran, and the during-load ones those the next launch's watch ran;
- the nodes' own state updates, made on the recorded results by the functions the nodes make them with (a
  launcher's record from its launch event, watch's run_ended, record_fault, apply's kept, revert's taken_off,
  set_aside for a refused or rejected patch), so the state the routers read is the state the session had;
- the report: render_report on the rebuilt state, whose faults and patches must match the fault events and
  the exit event's patch list (and its outcome and launch count).

What it does NOT re-execute: anything that needs the target. Launches, log parsing (the trace holds the
fault, not the log), the candidate search (playbooks and derived repairs read the target's source, which a
trace does not record), applying patches, running checks and the validator. Their recorded results are taken
as given; replay checks what today's code DECIDES from them. A run_end cut off by a medic crash (the next
event is a resume) has no observed successor and is not compared. The scan is a node like the others: its
findings are faults whose router (after_scan) is compared like any other. A canary's verified output is
recorded as ``canary_passed`` (traces written before that event existed replay their canary sessions with a
divergence at that point).

A resumed session holds what medic did again: a watch resumed re-queues its checks from the checkpoint (its
``checks_queued`` event starts replay's queue over, and a run_end recorded before the watch's checkpoint is
overtaken by the resumed watch's own), a node stopped before its checkpoint records again (the
second record counts: ``redone``), and a verify run again keeps its last run's checks. A trace that stops before
its exit event (cut mid-line, medic killed, a session still waiting for a person) is compared up to there, and
``ReplayResult.stopped`` says where it stops: `medic replay` exits 1 then, as at a divergence.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import cast

from agent import graph
from agent.answers import asked_again, confirm_answered, replayed_answer
from agent.codec import fault_from_dict
from agent.decisions import set_aside, taken_off
from agent.faults import model_patch_failed, model_patch_newest, record_fault
from agent.launch_records import LaunchRecord, launch_record
from agent.nodes.patching import revert_index
from agent.nodes.watch import run_ended
from agent.patch_payloads import CandidateData as CandidateEvent
from agent.patch_payloads import ConfirmData, NoRepairData, NotProposedData
from agent.patch_payloads import FaultData as FaultEvent
from agent.patch_payloads import PatchData as PatchEvent
from agent.patch_records import AnswerData, CandidateData, FaultData
from agent.payloads import ExitData, MessageData, PreflightData, ValidateData, data_of
from agent.readers.replay_checks import CheckSteps
from agent.readers.replay_core import ReplayResult
from agent.readers.replay_events import (
    diff_files,
    frame_of,
    medic_failed,
    redone,
    refused_revert,
    waiting_for,
    watched_again,
    where_it_stops,
)
from agent.readers.replay_shards import replay_shard
from agent.readers.tracefile import Event, read_trace
from agent.record.report import render_report
from agent.run_payloads import LaunchData, RunEndData, ShardData
from agent.state import PreflightInfo


class _Replay(CheckSteps):
    def step(self, i: int, ev: Event) -> None:
        s, d, rest = self.state, ev.data, self.trace.events[i + 1:]
        self.now = ev.ts
        if redone(ev, rest):  # the node ran again after a resume: its second record is the one that counts
            return
        if ev.kind == "preflight":  # a fresh preflight starts the state over, as the node does
            found = data_of(d, PreflightData)
            preflight = cast(PreflightInfo, {k: found.get(k) for k in ("versions", "site_packages", "roots",
                                                                       "warnings", "canary", "wrapped")})
            self.state = {"preflight": preflight, "started": ev.ts, "launches": [], "faults": [], "patches": [],
                          "verifications": [], "tried": [], "pending_checks": [], "session_id": self.config.session_id}
        elif ev.kind == "scan":  # the scan has nothing left: the first launch is next
            s.update({"scan_done": True, "fault": None, "proposal": None, "candidates": []})
            self.expect(ev, "after_scan", graph.after_scan(s), rest)
        elif ev.kind == "launch":  # the launcher's record, from what its event says (detached shards' folders too)
            launched = data_of(d, LaunchData)
            record = launch_record({**launched, "run_dir": launched.get("run_dir", ""), "started": ev.ts,
                                    "exit_code": None, "phases": {}, "checks_during_load": []})
            s["launches"] = [*s.get("launches", []), record]
            s["run"] = record
            self.queue_watch()
        elif ev.kind == "checks_queued":
            self.checks_queued(ev)
        elif ev.kind == "check":
            self.check(ev)
        elif ev.kind == "run_end":
            if watched_again(ev, rest):  # the resumed watch starts its queue over from the checkpoint
                return
            end = data_of(d, RunEndData)
            run = cast(LaunchRecord, {**(s.get("run") or launch_record({})), "exit_code": end.get("exit_code"),
                                      "failed_patch": end.get("failed_patch")})
            # watch's own update; the checks it ran joined the verifications as their events came
            self.take(run_ended(s, run, end.get("outcome") or "", ev.ts, dict(end.get("phases") or {}),
                                self.watch_results))
            self.watch_results = []
            self.expect(ev, "after_watch", graph.after_watch(s), rest)
        elif ev.kind == "fault":
            self.fault(ev, rest)
        elif ev.kind == "candidate":
            cand = data_of(d, CandidateEvent)
            proposed: CandidateData = {
                "patch": {"id": cand.get("patch_id", ""), "files": diff_files(cand.get("diff") or ""),
                          "host_steps": list(cand.get("host_steps") or [])},
                "origin": cand.get("origin") or "", "rationale": cand.get("rationale", ""),
                "evidence": list(cand.get("evidence") or []), "checks": list(cand.get("checks") or [])}
            s["proposal"] = self.proposed[cand.get("patch_id", "")] = proposed
            s.pop("outcome", None)
            self.expect(ev, "after_repair", graph.after_repair(s, self.deps), rest)
        elif ev.kind == "no_repair":
            none = data_of(d, NoRepairData)
            pid = str(none.get("patch_id"))
            s.update({"proposal": asked_again(pid, self.proposed.get(pid)) if none.get("asks") else None})
            if not none.get("left_for") and not none.get("asks"):  # left for the runs, or for a person: not the end
                s.update({"outcome": none.get("outcome") or "no_repair",
                          "outcome_detail": f"{none.get('fault')} — {none.get('why')}"})
            self.expect(ev, "after_repair", graph.after_repair(s, self.deps), rest)
        elif ev.kind == "approval_answer":  # a person's (or a policy's) answer, as the approve node took it
            said = cast(AnswerData, {k: v for k, v in d.items() if k in AnswerData.__annotations__})
            self.take(replayed_answer(s, said, s.get("proposal")))
        elif ev.kind == "not_proposed":  # a diff a person rejected, found again: declined, not proposed
            pid = str(data_of(d, NotProposedData).get("patch_id"))
            s.update({"tried": [*s.get("tried", []), pid], "declined": [*s.get("declined", []), pid]})
        elif ev.kind == "patch_refused":
            self.take(set_aside(s, str(data_of(d, PatchEvent).get("patch_id"))))
            self.expect(ev, "after_apply", graph.after_apply(s), rest)
        elif ev.kind == "applied":
            self.applied(ev, rest)
        elif refused_revert(ev):  # the patch could not come off: the session ends there
            s.update({"proposal": None, "outcome": "no_repair",
                      "outcome_detail": str(data_of(d, MessageData).get("message", ""))})
        elif ev.kind == "reverted":  # one event per patch taken off; those stacked above it ("above") come first
            off = data_of(d, PatchEvent)
            patches = list(s.get("patches", []))
            at = revert_index(patches, s.get("run"))
            if not off.get("above") and not (patches and patches[at]["patch"]["id"] == off.get("patch_id")):
                self.differ(ev, f"revert undid {off.get('patch_id')}, but revert would undo "
                                f"{patches[at]['patch']['id'] if patches else 'none'}")
            self.take(taken_off(s, [str(off.get("patch_id"))]))
        elif ev.kind == "shard":  # a sharded session: the last shard's verdict of a pass decides
            previous = self.trace.events[i - 1] if i else None
            if replay_shard(s, data_of(d, ShardData), rest,
                            after_fault=previous is not None and previous.kind == "fault"):
                self.expect(ev, "after_validate", graph.after_validate(s), rest)
        elif ev.kind == "validate" and not (rest and rest[0].kind == "shard"):
            self.validate(ev, rest)
        elif ev.kind == "confirm_answer":
            answer = data_of(d, ConfirmData)
            self.take(confirm_answered(s, {**answer, "at": answer.get("at", ev.ts)}))
            if answer.get("action") != "approve":
                s.update({"outcome": "rejected", "outcome_detail": f"launch {answer.get('launch')} was not confirmed"})
            self.expect(ev, "after_confirm", graph.after_confirm(s), rest)
        elif ev.kind == "exit" and not medic_failed(ev):  # medic's own failure decides nothing
            self.exit(ev)
        return None

    def validate(self, ev: Event, rest: list[Event]) -> None:
        s, verdict = self.state, data_of(ev.data, ValidateData)
        # medic's own check of a wrong output (agent/validation.py measured_facts) sits between the verdict and
        # the fault it finds: the fault is the validator's next event that is not that check
        nxt = next((e for e in rest if not (e.kind == "check" and e.node == "validate")), None)
        wrong = nxt is not None and nxt.kind == "fault" and nxt.node == "validate"
        if verdict.get("verified") and nxt is not None and nxt.kind == "canary_passed":
            s.update({"canary_done": True, "fault": None})  # the canary is right: the target model is next
        elif verdict.get("verified"):
            s.update({"outcome": "verified", "outcome_detail": str(verdict.get("summary", ""))})
        elif not wrong:
            s.update({"outcome": "unverified", "outcome_detail": str(verdict.get("summary", ""))})
        if not wrong:
            self.expect(ev, "after_validate", graph.after_validate(s), rest)

    def fault(self, ev: Event, rest: list[Event]) -> None:
        s, d = self.state, data_of(ev.data, FaultEvent)
        exc_type, _, message = str(d.get("summary", "")).partition(": ")
        frames = [frame_of(f) for f in d.get("frames") or []]
        previous = (s.get("faults") or [FaultData()])[-1]
        fingerprint = d.get("fingerprint") or ("validate:" if ev.node == "validate" else "")
        if ev.node == "diagnose":
            repeated = bool(previous and fingerprint and previous.get("fingerprint") == fingerprint) or (
                model_patch_failed([(f["file"], f["line"]) for f in frames], list(s.get("patches") or []),
                                   list(s.get("faults") or [])))
            self.compared += 1
            if repeated != bool(d.get("repeated")):
                self.differ(ev, f"diagnose would mark this fault repeated={repeated}, the trace says "
                                f"{bool(d.get('repeated'))}")
        elif ev.node == "validate":  # a wrong output with a model's patch newest: that patch is reverted
            repeated = model_patch_newest(list(s.get("patches") or []))
        else:
            repeated = False
        self.faults_kept += 1
        fault = fault_from_dict({"stage": d.get("stage", ""), "exc_type": exc_type, "message": message,
                                 "frames": frames, "proc": d.get("proc"), "fingerprint": fingerprint})
        # the update diagnose, scan and validate make for a new fault (agent/faults.py)
        self.take(record_fault(s, fault, launch=run["n"] if (run := s.get("run")) else None,
                              repeated=repeated))
        s["outcome"] = None
        if ev.node == "validate":
            self.expect(ev, "after_validate", graph.after_validate(s), rest)
        elif ev.node == "scan":
            s["scan_attempted"] = [*s.get("scan_attempted", []), str(d.get("fingerprint"))]
            self.expect(ev, "after_scan", graph.after_scan(s), rest)
        else:
            self.expect(ev, "after_diagnose", graph.after_diagnose(s), rest)

    def exit(self, ev: Event) -> None:
        s, d = self.state, data_of(ev.data, ExitData)
        self.compared += 1
        ids = [p["patch"]["id"] for p in s.get("patches", [])]
        if d.get("patches") is not None and list(d["patches"]) != ids:
            return self.differ(ev, f"today's state keeps patches {ids}; the session ended with {d['patches']}")
        if d.get("outcome") != (s.get("outcome") or "internal_error"):
            return self.differ(ev, f"today's outcome is {s.get('outcome')!r}; the session's was {d.get('outcome')!r}")
        if d.get("launches") is not None and d["launches"] != len(s.get("launches", [])):
            return self.differ(ev, f"{len(s.get('launches', []))} launches rebuilt; the session counted "
                                   f"{d['launches']}")
        report = render_report(s, self.config)
        faults_section = report.split("## Faults, in order", 1)[-1].split("## Patches", 1)[0]
        listed = len(re.findall(r"^\d+\. \[", faults_section, re.M))
        recorded = self.faults_kept
        heads = re.findall(r"^### (\S+) \(", report, re.M)
        if listed != recorded or heads != ids:
            self.differ(ev, f"the report lists {listed} fault(s) and patches {heads}; the trace has "
                            f"{recorded} fault(s) and patches {ids}")
        return None


def replay(path: Path | str) -> ReplayResult:
    """Re-decide the recorded session with today's code; ``first_divergence`` is None when all agree."""
    start = time.perf_counter()
    trace = read_trace(path)
    rp = _Replay(trace)
    for i, ev in enumerate(trace.events):
        rp.step(i, ev)
    return ReplayResult(rp.compared, rp.divergence, time.perf_counter() - start, where_it_stops(trace),
                        waits=waiting_for(trace) is not None)
