"""The postmortem of a session, from its trace alone: what ran, what broke, what was patched, what it cost.

``summarize`` turns the events into launches, faults and patches once; the markdown here and the HTML page
(agent/postmortem_html.py) both render that, so the two never disagree.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.tracefile import Trace, read_trace

# the first phase after loading: reaching it means the weights were in memory
LOADED_PHASES = ("kv_cache", "warmup", "extracting", "done")
BEFORE_LOAD_STAGES = ("scan", "canary")


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
    def wasted(self) -> bool:
        return self.loaded and self.outcome != "exited"


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

    @property
    def caught(self) -> str:
        if self.stage in BEFORE_LOAD_STAGES:
            return f"before a load ({self.stage})"
        if self.stage == "validate":
            return "by the validator, after a full run"
        if self.launch is None or not self.launch.loaded:
            return "by a crash before the load"
        return f"by a crash after the load ({self.launch.load:.1f}s of load wasted)"


@dataclass
class PatchView:
    id: str
    origin: str
    rationale: str
    diff: str
    at: float
    fault: FaultView | None
    state: str = "proposed"  # proposed | applied | refused | reverted
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

    @property
    def load_spent(self) -> float:
        return sum(launch.load for launch in self.launches)

    @property
    def load_wasted(self) -> float:
        return sum(launch.load for launch in self.launches if launch.wasted)

    @property
    def kept(self) -> list[PatchView]:
        return [p for p in self.patches if p.state == "applied"]


def summarize(trace: Trace) -> Summary:
    t0 = float(trace.header.get("ts") or (trace.events[0].ts if trace.events else 0.0))
    out = Summary(session=trace.session, duration=trace.duration, problem=trace.problem)
    by_id: dict[str, PatchView] = {}
    current: LaunchView | None = None
    for ev in trace.events:
        d, at = ev.data, ev.ts - t0
        if ev.kind == "resume":
            out.resumes += 1
        elif ev.kind == "warning":
            out.warnings.append(str(d.get("message", "")))
        elif ev.kind == "launch":
            current = LaunchView(seq=len(out.launches) + 1, n=int(d.get("n") or 0), start=at,
                                 kind=str(d.get("kind") or "target"), reattached=bool(d.get("reattached")))
            out.launches.append(current)
        elif ev.kind == "run_end" and current is not None:
            current.outcome = str(d.get("outcome") or "")
            current.exit_code = d.get("exit_code")
            current.seconds = _num(d.get("seconds"), at - current.start)
            current.phases = {str(k): float(v) for k, v in (d.get("phases") or {}).items()}
        elif ev.kind == "fault":
            stage = str(d.get("stage") or "crash")
            out.faults.append(FaultView(
                seq=len(out.faults) + 1, stage=stage, summary=str(d.get("summary", "")), at=at,
                launch=current if stage not in BEFORE_LOAD_STAGES else None, proc=d.get("proc"),
                frames=[str(f) for f in d.get("frames") or []], repeated=bool(d.get("repeated"))))
        elif ev.kind == "candidate":
            pid = str(d.get("patch_id"))
            by_id[pid] = PatchView(id=pid, origin=str(d.get("origin", "")), rationale=str(d.get("rationale", "")),
                                   diff=str(d.get("diff", "")), at=at, fault=out.faults[-1] if out.faults else None)
            out.patches.append(by_id[pid])
        elif ev.kind in ("applied", "patch_refused", "reverted"):
            pid = str(d.get("patch_id"))
            patch = by_id.get(pid)
            if patch is None:  # applied without a recorded candidate (approve-mode edit): still show it
                patch = by_id[pid] = PatchView(id=pid, origin=str(d.get("origin", "")), rationale="",
                                               diff=str(d.get("diff", "")), at=at, fault=None)
                out.patches.append(patch)
            patch.state = {"applied": "applied", "patch_refused": "refused", "reverted": "reverted"}[ev.kind]
            patch.why = str(d.get("why", ""))
            if ev.kind == "applied":
                patch.diff, patch.files, patch.at = str(d.get("diff") or patch.diff), list(d.get("files") or []), at
        elif ev.kind == "check":
            out.checks.append({**d, "at": at})
        elif ev.kind == "exit":
            out.outcome, out.detail = str(d.get("outcome", "")), str(d.get("detail", ""))
    return out


def _num(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _one_line(text: str, limit: int = 200) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return (first[:limit] + "…") if len(first) > limit else first


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def postmortem_markdown(trace: Trace) -> str:
    s = summarize(trace)
    out = [f"# Postmortem: medic session {s.session}", "",
           f"**{s.outcome}** — {s.detail}", "",
           f"- wall clock: {s.duration:.1f}s, {len(s.launches)} launch(es), {len(s.faults)} fault(s), "
           f"{len(s.kept)} patch(es) kept" + (f", resumed {s.resumes} time(s)" if s.resumes else ""),
           f"- load time: {s.load_spent:.1f}s spent, {s.load_wasted:.1f}s wasted "
           "(loads of launches that then failed)"]
    if s.problem:
        out.append(f"- **warning:** {s.problem}")
    out += [f"- warning: {w}" for w in s.warnings]
    out += ["", "## Timeline", "", "| # | start | seconds | phases | outcome | faults | patches after |",
            "|---|---|---|---|---|---|---|"]
    for launch in s.launches:
        phases = ", ".join(f"{k} @{v:.1f}s" for k, v in launch.phases.items()) or "-"
        faults = ", ".join(str(f.seq) for f in s.faults if f.launch is launch) or "-"
        nxt = s.launches[launch.seq].start if launch.seq < len(s.launches) else float("inf")
        after = ", ".join(p.id for p in s.patches if p.state != "proposed" and launch.start < p.at < nxt) or "-"
        secs = f"{launch.seconds:.1f}" if launch.seconds is not None else "?"
        label = f"{launch.seq} (L{launch.n}{', reattached' if launch.reattached else ''})"
        out.append(f"| {label} | +{launch.start:.1f}s | {secs} | {phases} | {_cell(launch.outcome)} | "
                   f"{faults} | {after} |")
    before = [f for f in s.faults if not f.caught.startswith("by a crash after")]
    out += ["", "## Faults", "",
            f"{len(before)} caught before any model load was wasted, "
            f"{len(s.faults) - len(before)} by a crash after a load.", ""]
    for f in s.faults:
        where = f" at `{f.frames[-1]}`" if f.frames else ""
        proc = f" in `{f.proc}`" if f.proc else ""
        which = f" launch {f.launch.seq}" if f.launch else ""
        out.append(f"{f.seq}. [{f.stage}]{which}: `{_one_line(f.summary)}`{proc}{where} — caught {f.caught}"
                   + (" (repeated right after its patch)" if f.repeated else ""))
    out += ["", "## Patches", ""]
    for p in s.patches:
        fault = f" for fault {p.fault.seq}" if p.fault else ""
        out += [f"### {p.id} — {p.origin}{fault}: {p.state}" + (f" ({p.why})" if p.why else ""), "",
                p.rationale or "(no rationale recorded)", "", "```diff", p.diff.rstrip(), "```", ""]
    out += ["## Verifications", ""]
    for c in s.checks:
        when = {"before": "before launch", "during_load": "during load"}.get(str(c.get("when")), str(c.get("when")))
        who = f" {c['patch_id']}" if c.get("patch_id") else f" launch {c.get('launch', '?')}"
        out.append(f"- {'ok' if c.get('ok') else 'FAILED'} [{when}]{who}: {c.get('check', '')} — "
                   f"{_one_line(str(c.get('detail', '')), 160)}")
    out += ["", "## Final diffs (applied, not reverted)", ""]
    out += [f"```diff\n{p.diff.rstrip()}\n```\n" for p in s.kept] or ["(none)", ""]
    out += ["## What is left", "", f"{s.outcome}: {s.detail}" if s.outcome != "verified" else
            "nothing: the output was verified against the reference."]
    return "\n".join(out) + "\n"


def print_postmortem(path: Path | str) -> None:
    """Markdown to stdout (``medic run --postmortem``, ``make demo``); a bad trace raises TraceError."""
    text = postmortem_markdown(read_trace(path))
    sys.stdout.write(text)
    sys.stdout.flush()
