"""scan: fix what the static drift scan finds before the first launch (each one a load saved).

The scan runs again after every patch, since a patch moves lines; a finding no repair can fix is left for
the runs to confirm (the scan may be wrong where the real call differs at run time)."""

from __future__ import annotations

import json
from typing import Any

from agent.checks import run_before_checks
from agent.codec import candidate_to_dict, fault_to_dict
from agent.deps import Deps
from agent.scan import scan as scan_drift
from agent.state import SessionState
from tools.errors import MedicError, PatchError
from tools.host import read_text
from tools.patches import apply_patch, revert_patch

MAX_SCAN_FIXES = 20


def scan(state: SessionState, deps: Deps) -> dict[str, Any]:
    if not deps.config.scan or state.get("scan_findings") is not None:
        return {}
    ctx = deps.context(state)
    ctx.architectures = target_architectures(deps)
    driver = next((arg for arg in deps.config.target.command if arg.endswith(".py")), None)
    attempted: set[str] = set()
    faults, patches = list(state.get("faults") or []), list(state.get("patches") or [])
    findings: list[dict[str, Any]] = []
    for _ in range(MAX_SCAN_FIXES):
        fresh = [f for f in scan_drift(ctx, driver) if f.fingerprint not in attempted]
        if not fresh:
            break
        fault = fresh[0]
        attempted.add(fault.fingerprint)
        findings.append(fault_to_dict(fault))
        deps.record("fault", "scan", {"stage": "scan", "summary": fault.summary,
                                      "frames": [f"{f.file}:{f.line} {f.func}" for f in fault.frames]})
        found = deps.engine.candidates(ctx, fault)
        if not found:
            continue
        cand = found[0]
        try:
            apply_patch(deps.host, cand.patch, roots=ctx.roots, ledger_dir=deps.config.ledger_dir)
        except PatchError as err:
            deps.record("patch_refused", "scan", {"patch_id": cand.patch.id, "why": str(err)})
            continue
        checks = run_before_checks(ctx, cand, deps.config.target.env,
                                   lambda result: deps.record("check", "scan", result))
        if not all(r["ok"] for r in checks):
            revert_patch(deps.host, cand.patch.id, ledger_dir=deps.config.ledger_dir)
            deps.record("reverted", "scan", {"patch_id": cand.patch.id, "why": "its checks failed"})
            continue
        deps.record("applied", "scan", {"patch_id": cand.patch.id, "origin": cand.origin, "rationale": cand.rationale,
                                        "files": [f.path for f in cand.patch.files], "diff": cand.patch.diff})
        faults.append({**fault_to_dict(fault), "launch": None, "repeated": False})
        patches.append({**candidate_to_dict(cand), "fault_index": len(faults) - 1})
    deps.record("scan", "scan", {"summary": f"{len(findings)} finding(s), {len(patches)} patched before any launch"})
    return {"scan_findings": findings, "faults": faults, "patches": patches}


def target_architectures(deps: Deps) -> tuple[str, ...]:
    """The model's architectures from its config.json: the target's model_dir, else a folder the command names."""
    target = deps.config.target
    folders = [target.model_dir] if target.model_dir else [a for a in target.command if "/" in a][:8]
    for folder in folders:
        if folder and deps.host.exists(f"{folder}/config.json"):
            try:
                config = json.loads(read_text(deps.host, f"{folder}/config.json"))
            except (MedicError, ValueError):
                return ()
            archs = config.get("architectures") if isinstance(config, dict) else None
            return tuple(a for a in archs or [] if isinstance(a, str))
    return ()
