"""diagnose: turn what ended the run into a Fault — the root cause in the launch's log (agent/faults.py), as the
launcher explains it: how Slurm ended a job, which side of a server and its client failed."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from agent.deps import Deps
from agent.faults import (
    INNERMOST_FRAMES,
    answered_fault,
    fault_from_log,
    model_patch_failed,
    ran_instead,
    record_fault,
)
from agent.job import where_looked
from agent.launchers.base import read_log
from agent.state import SessionState

__all__ = ["diagnose", "fault_from_log"]  # fault_from_log: where tests and tools have always found it


def diagnose(state: SessionState, deps: Deps) -> dict[str, Any]:
    record = state.get("run")
    assert record is not None, "diagnose reads the launch that just ended"
    logged = fault_from_log(read_log(deps.host, deps.launcher.log_of(record)),
                            stage="canary" if record.get("kind") == "canary" else "crash",
                            where=partial(where_looked, deps.host, deps.config.target))
    fault, side, server = deps.launcher.explain(state, record, logged)
    instead = ran_instead(fault, deps.config.target.python)
    if instead:  # a program of the host ran anyway (the script named it, or set its own PATH): say which
        fault = replace(fault, message=f"{fault.message} ({instead})")
    # the log is the job's output: it reaches the checkpoint, the report and any prompt only redacted
    red = deps.trace.redactor
    fault = replace(fault, message=red.text(fault.message), log_excerpt=red.text(fault.log_excerpt),
                    warnings=tuple(red.text(w) for w in fault.warnings))
    faults = list(state.get("faults") or [])
    previous = faults[-1] if faults else None
    patches = list(state.get("patches") or [])
    failed = model_patch_failed([(f.file, f.line) for f in fault.frames], patches, faults)
    repeated = bool(previous and fault.fingerprint and previous.get("fingerprint") == fault.fingerprint) or failed
    innermost = fault.frames[-INNERMOST_FRAMES:]
    deps.record("fault", "diagnose", {"stage": fault.stage, "summary": fault.summary, "proc": fault.proc,
                                      "fingerprint": fault.fingerprint, "repeated": repeated,
                                      "frames": [f"{f.file}:{f.line} {f.func}" for f in innermost],
                                      **({"side": side, "server": server} if side else {})})
    update = record_fault(state, fault, launch=record.get("n"), repeated=repeated, side=side, server=server)
    if failed:  # the model's patch goes (revert); the fault it answered is the one to repair again
        update["fault"] = answered_fault(state)
    return update
