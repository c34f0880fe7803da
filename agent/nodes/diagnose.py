"""diagnose: turn what ended the run into a Fault — the root-cause traceback, or the validator's verdict.

The root cause is picked by tools/tracebacks (a worker's traceback beats the driver's "see above"); the
frames medic may fix are gathered from EVERY traceback of the run, because a worker's root cause has no
caller frames and the line that fails is often not the line to fix.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent.codec import fault_to_dict
from agent.deps import Deps
from agent.nodes.launch import read_log
from agent.repair.types import Fault, FrameRef
from agent.state import FaultData, SessionState
from tools import logs, tracebacks

EXCERPT_LINES = 60


def fault_from_log(data: bytes, stage: str = "crash") -> Fault:
    lines = logs.clean_lines(data)
    found = tracebacks.extract_tracebacks(lines)
    root = tracebacks.root_cause(found)
    excerpt = "\n".join(f"({line.proc}) {line.text}" if line.proc else line.text for line in lines[-EXCERPT_LINES:])
    if root is None:
        last = next((line.text for line in reversed(lines) if line.text.strip()), "(empty log)")
        return Fault(stage=stage, exc_type="NoTraceback", message=last, frames=(), log_excerpt=excerpt)  # type: ignore[arg-type]
    callers: list[FrameRef] = []
    for tb in found:
        chain = [tb]
        while chain[-1].cause is not None:
            chain.append(chain[-1].cause)
        for link in chain:
            callers.extend(FrameRef(f.file, f.line, f.func, f.code or "") for f in link.frames)
    innermost = root
    return Fault(
        stage=stage,  # type: ignore[arg-type]
        exc_type=innermost.exc_type or "UnknownError",
        message=innermost.message,
        frames=tuple(FrameRef(f.file, f.line, f.func, f.code or "") for f in innermost.frames),
        caller_frames=tuple(callers),
        fingerprint=logs.fingerprint(innermost).key,
        proc=innermost.proc,
        log_excerpt=excerpt,
    )


def diagnose(state: SessionState, deps: Deps) -> dict[str, Any]:
    record = state.get("run") or {}
    fault = fault_from_log(read_log(deps, record), stage="canary" if record.get("kind") == "canary" else "crash")
    if str(record.get("outcome") or "").startswith("scheduler:"):  # Slurm ended it: that is the fault, not a frame
        from agent.nodes.slurm_launch import scheduler_fault

        fault = scheduler_fault(record, fault.log_excerpt)
    side, server = None, None
    if deps.config.target.server_command:  # a two-process job: which side's traceback explains it
        from agent.nodes.server import sided

        fault, side, server = sided(state, deps, record, fault, fault_from_log)
    # the log is the job's output: it reaches the checkpoint, the report and any prompt only redacted
    red = deps.trace.redactor
    fault = replace(fault, message=red.text(fault.message), log_excerpt=red.text(fault.log_excerpt))
    faults = list(state.get("faults") or [])
    previous = faults[-1] if faults else None
    repeated = bool(previous and fault.fingerprint and previous.get("fingerprint") == fault.fingerprint)
    deps.record("fault", "diagnose", {"stage": fault.stage, "summary": fault.summary, "proc": fault.proc,
                                      "fingerprint": fault.fingerprint, "repeated": repeated,
                                      "frames": [f"{f.file}:{f.line} {f.func}" for f in fault.frames[-4:]],
                                      **({"side": side, "server": server} if side else {})})
    return record_fault(state, fault, launch=record.get("n"), repeated=repeated, side=side, server=server)


def record_fault(state: SessionState, fault: Fault, *, launch: Any, repeated: bool = False,
                 side: str | None = None, server: int | None = None) -> dict[str, Any]:
    """The state update for a new fault: it becomes current, joins the list, and its candidates start fresh.

    A fault that repeats right after a patch for it means the patch did not cure it: keep the tried list, so
    the next candidate gets its turn.
    """
    current = fault_to_dict(fault)
    if side:  # a two-process job: which process a fix touches; a server-side one restarts the server
        current["side"], current["server"] = side, server
    entry: FaultData = {**current, "launch": launch, "repeated": repeated}
    update: dict[str, Any] = {"fault": current, "faults": [*(state.get("faults") or []), entry], "candidates": []}
    if not repeated:
        update["tried"] = []
    return update
