"""A session's trace summed up once: its launches, faults and patches as views (each says when it was caught and
what it cost), which the markdown (agent/readers/postmortem.py) and the HTML page (postmortem_html.py) both render."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.patch_payloads import CandidateData, FaultData, PatchData
from agent.payloads import ExitData, MessageData, data_of
from agent.readers.postmortem_answers import chosen_launches
from agent.readers.tracefile import Trace
from agent.record.report import human_numbers, human_seconds
from agent.run_payloads import LaunchData, RunEndData
from tools.tracebacks import MAX_SUMMARY_CHARS, message_line

# the first phase after loading: reaching it means the weights were in memory
LOADED_PHASES = ("kv_cache", "warmup", "extracting", "done")
BEFORE_LAUNCH_STAGES = ("scan", "preflight")  # predicted from the source: no launch involved


@dataclass
class LaunchView:
    seq: int  # 1-based order in the trace (a resumed session may reuse launch numbers)
    n: int
    start: float  # seconds since the session started
    kind: str = "target"
    seconds: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    outcome: str = "unknown: medic stopped watching"
    exit_code: Any = None
    reattached: bool = False
    beside: bool = False  # a target started beside the canary, adopted once the canary had its answer
    chosen_by: str = ""  # a person chose to launch into a fault whose repair they rejected (postmortem_answers.py)

    @property
    def loaded(self) -> bool:
        return "loading" in self.phases

    @property
    def load(self) -> float:
        """Seconds spent reaching the end of the load (the run's length when it ended while loading)."""
        after = [self.phases[p] for p in LOADED_PHASES if p in self.phases]
        if after:
            return min(after)
        return (self.seconds or 0.0) if self.loaded else 0.0

    @property
    def canary(self) -> bool:
        return self.kind == "canary"

    @property
    def wasted(self) -> bool:
        """A target load that was thrown away: the launch loaded the model, then failed."""
        return not self.canary and self.loaded and self.outcome != "exited" and not self.chosen_by


@dataclass
class FaultView:
    seq: int
    stage: str
    summary: str
    at: float
    launch: LaunchView | None
    proc: str | None = None
    frames: list[str] = field(default_factory=list)
    repeated: bool = False
    side: str | None = None  # a two-process job: "server" or "client", the log its root cause came from

    @property
    def when(self) -> str:
        """scan | canary | before_load | after_load | validate, and for a two-process job client_run |
        server_start | server_request: what finding this fault cost."""
        if self.stage in BEFORE_LAUNCH_STAGES:
            return "scan"
        if self.stage == "canary" or (self.launch is not None and self.launch.canary):
            return "canary"  # a canary's wrong output is recorded with stage "validate"
        if self.stage == "validate":
            return "validate"
        if self.launch is not None and self.launch.chosen_by:
            return "chosen"
        if self.side == "client":  # a two-process job: the model loads in the server, never in its client
            return "client_run"
        if self.side == "server":
            return "server_start" if self.launch is not None and self.launch.kind == "server" else "server_request"
        return "after_load" if self.launch is not None and self.launch.loaded else "before_load"

    @property
    def caught(self) -> str:
        when = self.when
        if when == "scan":
            return f"before any launch ({self.stage})"
        if when == "canary":
            return "by a canary run on a tiny model: a target load saved"
        if when == "validate":
            return "by the validator, after a full run"
        if when in ("client_run", "server_start", "server_request"):
            return CAUGHT[when]
        if when == "chosen" and self.launch is not None:
            return (f"by a launch chosen by {self.launch.chosen_by} after the scan's repair for it was rejected "
                    f"({human_seconds(self.launch.load)} of target load spent on that choice)")
        if when == "before_load" or self.launch is None:
            return "by a crash before the load"
        return f"by a crash after the load ({human_seconds(self.launch.load)} of target load wasted)"

    @property
    def said(self) -> str:
        """The fault's type and whole message on one line (a trace is untrusted: bounded)."""
        text = message_line(self.summary, MAX_SUMMARY_CHARS + 100)
        return human_numbers(text) if self.stage == "validate" else text  # medic's own verdict, not a quote


@dataclass
class PatchView:
    id: str
    origin: str
    rationale: str
    diff: str
    at: float
    fault: FaultView | None
    state: str = "proposed"  # proposed | applied | refused | reverted | rejected
    why: str = ""
    files: list[str] = field(default_factory=list)


@dataclass
class Summary:
    session: str
    duration: float
    launches: list[LaunchView] = field(default_factory=list)
    faults: list[FaultView] = field(default_factory=list)
    patches: list[PatchView] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    resumes: int = 0
    outcome: str = "unfinished"
    detail: str = "the trace has no exit event: the session did not finish (or is still running)"
    problem: str | None = None
    two_process: bool = False  # a server + client job: the model loads in the server (postmortem_server.py)

    @property
    def targets(self) -> list[LaunchView]:
        return [launch for launch in self.launches if not launch.canary]

    @property
    def canaries(self) -> list[LaunchView]:
        return [launch for launch in self.launches if launch.canary]

    @property
    def load_spent(self) -> float:
        """Seconds spent loading the target model (canary runs load a tiny one: see ``canary_seconds``)."""
        return sum(launch.load for launch in self.targets)

    @property
    def load_wasted(self) -> float:
        return sum(launch.load for launch in self.targets if launch.wasted)

    @property
    def canary_seconds(self) -> float:
        return sum(launch.seconds or 0.0 for launch in self.canaries)

    def loads(self) -> list[str]:
        """Target loads and canary runs, each counted apart: a canary loads a tiny model, not the target."""
        loaded, wasted = [t for t in self.targets if t.loaded], [t for t in self.targets if t.wasted]
        out = [] if self.two_process else [  # a client run loads no model: its server's loads are counted apart
            f"target loads: {len(loaded)} ({human_seconds(self.load_spent)}), wasted: {len(wasted)} "
            f"({human_seconds(self.load_wasted)}: loads of target launches that then failed)"]
        chosen = [t for t in self.targets if t.chosen_by and t.loaded and t.outcome != "exited"]
        if chosen and not self.two_process:  # a person's decision, not medic's loss: said apart
            out.append(f"chosen by a person: {len(chosen)} ({human_seconds(sum(t.load for t in chosen))}: loads of "
                       "launches into a fault the scan found, after its repair was rejected)")
        if self.canaries:
            found = sum(1 for f in self.faults if f.when == "canary")
            out.append(f"canary runs: {len(self.canaries)} ({human_seconds(self.canary_seconds)} in all, on a tiny "
                       f"model); each of the {found} fault(s) found there saved a target load")
        return out

    def caught_counts(self) -> str:
        counts = {when: sum(1 for f in self.faults if f.when == when) for when in CAUGHT}
        parts = [f"{n} {CAUGHT[when]}" for when, n in counts.items() if n]
        return f"{len(self.faults)} fault(s)" + (": " + ", ".join(parts) if parts else "") + "."

    @property
    def kept(self) -> list[PatchView]:
        return [p for p in self.patches if p.state == "applied"]


CAUGHT = {"scan": "by the static scan before any launch", "canary": "by canary runs (no target load spent)",
          "before_load": "by a target run before its load", "after_load": "by a crash after a target load",
          "validate": "by the validator after a full target run",
          "client_run": "by a client run against the loaded server (no server load spent)",
          "server_start": "by the server's start, before its health endpoint answered (no client ran)",
          "server_request": "by the loaded server, at a client's request",
          "chosen": "by a launch a person chose after rejecting its repair"}


def summarize(trace: Trace) -> Summary:
    t0 = float(trace.header.get("ts") or (trace.events[0].ts if trace.events else 0.0))
    out = Summary(session=trace.session, duration=trace.duration, problem=trace.problem,
                  two_process=any(e.kind == "server" for e in trace.events))
    by_id: dict[str, PatchView] = {}
    current: LaunchView | None = None
    chosen = chosen_launches(trace)
    for ev in trace.events:
        d, at = ev.data, ev.ts - t0
        if ev.kind == "resume":
            out.resumes += 1
        elif ev.kind == "warning":
            out.warnings.append(str(data_of(d, MessageData).get("message", "")))
        elif ev.kind == "launch":
            launch = data_of(d, LaunchData)
            current = LaunchView(seq=len(out.launches) + 1, n=int(launch.get("n") or 0), start=at,
                                 kind=str(launch.get("kind") or "target"), reattached=bool(launch.get("reattached")),
                                 beside=bool(launch.get("beside")), chosen_by=chosen.get(len(out.launches) + 1, ""))
            out.launches.append(current)
        elif ev.kind == "run_end" and current is not None:
            end = data_of(d, RunEndData)
            current.outcome = str(end.get("outcome") or "")
            current.exit_code = end.get("exit_code")
            current.seconds = _num(end.get("seconds"), at - current.start)
            current.phases = {str(k): float(v) for k, v in (end.get("phases") or {}).items()}
        elif ev.kind == "fault":
            fault = data_of(d, FaultData)
            stage = str(fault.get("stage") or "crash")
            out.faults.append(FaultView(
                seq=len(out.faults) + 1, stage=stage, summary=str(fault.get("summary", "")), at=at,
                launch=current if stage not in BEFORE_LAUNCH_STAGES else None, proc=fault.get("proc"),
                frames=[str(f) for f in fault.get("frames") or []], repeated=bool(fault.get("repeated")),
                side=fault.get("side")))
        elif ev.kind == "candidate":
            cand = data_of(d, CandidateData)
            pid = str(cand.get("patch_id"))
            by_id[pid] = PatchView(id=pid, origin=str(cand.get("origin", "")),
                                   rationale=str(cand.get("rationale", "")), diff=str(cand.get("diff", "")), at=at,
                                   fault=out.faults[-1] if out.faults else None)
            out.patches.append(by_id[pid])
        elif ev.kind in ("applied", "patch_refused", "reverted"):
            change = data_of(d, PatchData)
            pid = str(change.get("patch_id"))
            patch = by_id.get(pid)
            if patch is None:  # applied without a candidate (an approve-mode edit, the old scan loop): show it
                patch = by_id[pid] = PatchView(id=pid, origin=str(change.get("origin", "")), rationale="",
                                               diff=str(change.get("diff", "")), at=at,
                                               fault=out.faults[-1] if out.faults else None)
                out.patches.append(patch)
            # the reason is on the candidate or on the applied event (the scan recorded only the latter)
            patch.rationale = patch.rationale or str(change.get("rationale") or "")
            patch.state = {"applied": "applied", "patch_refused": "refused", "reverted": "reverted"}[ev.kind]
            patch.why = str(change.get("why", ""))
            if ev.kind == "applied":
                patch.diff, patch.files, patch.at = (str(change.get("diff") or patch.diff),
                                                     list(change.get("files") or []), at)
        elif ev.kind == "approval_answer" and d.get("action") == "reject" and str(d.get("patch_id")) in by_id:
            said = by_id[str(d.get("patch_id"))]  # a person's (or a policy's) no: a decision, not a failure
            said.state, said.why = "rejected", f"by {d.get('by') or 'a person'}: {d.get('reason') or 'no reason'}"
        elif ev.kind == "check":
            out.checks.append({**d, "at": at})
        elif ev.kind == "exit":
            end_ = data_of(d, ExitData)
            out.outcome, out.detail = str(end_.get("outcome", "")), str(end_.get("detail", ""))
    return out


def _num(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def rationale(p: PatchView) -> str:
    if p.rationale:
        return p.rationale
    return "(no rationale recorded" + (f"; the fault it fixes: `{p.fault.said}`)" if p.fault else ")")
