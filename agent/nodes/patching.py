"""repair, apply, verify, revert: from a fault to a patch on disk that has been checked.

One side effect per node: apply writes files, revert restores them; both go through tools/patches, whose
host-side ledger makes a repeated call (a resumed session) a no-op.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from agent.checks import run_before_checks
from agent.codec import candidate_from_dict, candidate_to_dict, fault_from_dict, patch_diff
from agent.deps import Deps
from agent.state import SessionState
from tools.errors import PatchError
from tools.patches import Patch, apply_patch, revert_patch


def repair(state: SessionState, deps: Deps) -> dict[str, Any]:
    fault = fault_from_dict(state["fault"] or {})
    tried = list(state.get("tried") or [])
    queue = [c for c in state.get("candidates") or [] if c["patch"]["id"] not in tried]
    if not queue and len(tried) < deps.config.budgets.max_candidates_per_fault:
        ctx = deps.context(state)
        found = deps.engine.candidates(ctx, fault, skip=frozenset(tried))
        queue = [candidate_to_dict(c) for c in found]
        for note in deps.engine.notes:
            deps.record("warning", "repair", {"message": note})
    if not queue or len(tried) >= deps.config.budgets.max_candidates_per_fault:
        why = "no playbook, derived repair or model found a patch" if not tried else (
            f"{len(tried)} candidate patch(es) failed")
        deps.record("no_repair", "repair", {"fault": fault.summary, "why": why})
        return {"candidates": [], "proposal": None, "outcome": "no_repair",
                "outcome_detail": f"{fault.summary} — {why}"}
    proposal = queue[0]
    deps.record("candidate", "repair", {"patch_id": proposal["patch"]["id"], "origin": proposal["origin"],
                                        "rationale": proposal["rationale"], "evidence": proposal["evidence"],
                                        "diff": patch_diff(proposal), "checks": proposal["checks"]})
    return {"candidates": queue, "proposal": proposal}


def apply(state: SessionState, deps: Deps) -> dict[str, Any]:
    proposal = state["proposal"] or {}
    cand = candidate_from_dict(proposal)
    ctx = deps.context(state)
    try:
        result = apply_patch(deps.host, cand.patch, roots=ctx.roots, ledger_dir=deps.config.ledger_dir)
    except PatchError as err:  # stale, outside the roots, does not compile: nothing was written
        deps.record("patch_refused", "apply", {"patch_id": cand.patch.id, "why": str(err)})
        return {"tried": [*(state.get("tried") or []), cand.patch.id], "proposal": None}
    deps.record("applied", "apply", {"patch_id": cand.patch.id, "origin": cand.origin, "rationale": cand.rationale,
                                     "files": [f.path for f in cand.patch.files],
                                     "already_applied": result.already_applied, "diff": cand.patch.diff})
    entry = {**proposal, "fault_index": len(state.get("faults") or []) - 1}
    patches = [p for p in state.get("patches") or [] if p["patch"]["id"] != cand.patch.id]
    return {"patches": [*patches, entry]}


def verify(state: SessionState, deps: Deps) -> dict[str, Any]:
    """Checks that need no target-env process run now; the rest wait for the next launch's load."""
    cand = candidate_from_dict(state["proposal"] or {})
    results = run_before_checks(deps.context(state), cand, deps.config.target.env,
                                lambda result: deps.record("check", "verify", result))
    update: dict[str, Any] = {"verifications": [*(state.get("verifications") or []), *results]}
    if all(r["ok"] for r in results):
        update["pending_checks"] = [asdict(c) for c in cand.checks if c.when == "during_load"]
    return update


def revert(state: SessionState, deps: Deps) -> dict[str, Any]:
    """Undo the last patch: its checks failed, or the fault it was for came back."""
    patches = list(state.get("patches") or [])
    if not patches:
        return {}
    last = patches.pop()
    patch = Patch.model_validate(last["patch"])
    revert_patch(deps.host, patch.id, ledger_dir=deps.config.ledger_dir)
    deps.record("reverted", "revert", {"patch_id": patch.id, "why": "its checks failed or its fault came back"})
    return {"patches": patches, "tried": [*(state.get("tried") or []), patch.id], "proposal": None,
            "pending_checks": []}


def verify_passed(state: SessionState) -> bool:
    proposal = state.get("proposal") or {}
    pid = proposal.get("patch", {}).get("id")
    mine = [v for v in state.get("verifications") or [] if v.get("patch_id") == pid and v["when"] == "before"]
    return all(v["ok"] for v in mine)
