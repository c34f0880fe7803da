"""scan: a detector. Each call finds the next drift the static scan sees before any launch and hands it to the
graph as a fault (stage ``scan``); the one repair → [approve/policy] → apply → verify path fixes it, and the
router comes back here while findings remain. With none left, the first launch goes ahead.

The scan runs again after every patch, since a patch moves lines. A finding no repair can fix is left for the
runs to confirm (the scan may be wrong where the real call differs at run time).
"""

from __future__ import annotations

from typing import Any

from agent.deps import Deps
from agent.faults import record_fault
from agent.job import driver_path, job_model_folder, seen_through
from agent.payloads import ScanData
from agent.remedies import env_edits, job_env
from agent.repair.scan import scan as scan_drift
from agent.repair.types import Fault
from agent.state import SessionState
from tools.errors import CommandTimeout
from tools.model_folder import architectures

MAX_SCAN_FINDINGS = 20  # a bound on the loop, whatever a rule keeps finding


def scan(state: SessionState, deps: Deps) -> dict[str, Any]:
    attempted = list(state.get("scan_attempted") or [])
    if not deps.config.scan or state.get("scan_done"):
        return {"scan_done": True}
    try:
        fresh = [f for f in findings(state, deps) if f.fingerprint not in attempted]
    except CommandTimeout as err:  # the scan saves loads, nothing needs it: what it did not read, a launch meets
        return scan_ended(state, deps, stopped=str(err))
    if not fresh or len(attempted) >= MAX_SCAN_FINDINGS:
        return scan_ended(state, deps)
    fault = fresh[0]
    deps.record("fault", "scan", {"stage": "scan", "summary": fault.summary, "fingerprint": fault.fingerprint,
                                  "finding": fault.finding.kind if fault.finding else None,
                                  "frames": [f"{f.file}:{f.line} {f.func}" for f in fault.frames]})
    return {"scan_attempted": [*attempted, fault.fingerprint], **record_fault(state, fault, launch=None)}


def findings(state: SessionState, deps: Deps) -> list[Fault]:
    ctx = deps.context(state)
    ctx.architectures = target_architectures(deps, state)
    env, _ = job_env(deps.host, deps.config.target.env, env_edits(state.get("patches") or []))
    ctx.job_env = env  # what the next launch will run with: the environment detector reads it
    seen = seen_through(deps.config.target, state)  # a wrapper's client, read through
    return scan_drift(ctx, driver_path(seen, deps.host))


def scan_ended(state: SessionState, deps: Deps, stopped: str = "") -> dict[str, Any]:
    attempted = state.get("scan_attempted") or []
    kept = sum(1 for p in state.get("patches") or [] if p.get("fault_index") is not None
               and (state.get("faults") or [{}])[p["fault_index"]].get("stage") == "scan")
    summary = f"{len(attempted)} finding(s), {kept} repaired before any launch"
    data: ScanData = {"summary": summary, "findings": len(attempted), "repaired": kept}
    if stopped:
        data["summary"] = f"{summary}; the scan stopped ({stopped}): the launches will meet what it did not read"
        data["stopped"] = stopped
    deps.record("scan", "scan", dict(data))
    return {"scan_done": True, "fault": None, "proposal": None, "candidates": []}


def target_architectures(deps: Deps, state: SessionState) -> tuple[str, ...]:
    """The model's architectures from its config.json, wherever the job names its folder (tools/model_folder.py)."""
    folder = job_model_folder(seen_through(deps.config.target, state), deps.host)
    return architectures(deps.host, folder.path) if folder else ()
