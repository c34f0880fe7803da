"""repair, apply, verify, revert: from a fault to a patch on disk that has been checked.

One side effect per node: apply writes files, revert restores them; both go through tools/patches, whose
host-side ledger makes a repeated call (a resumed session) a no-op.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent.checks import run_before_checks
from agent.codec import (
    candidate_from_dict,
    candidate_to_dict,
    check_from_dict,
    check_to_dict,
    fault_from_dict,
    patch_diff,
    patch_to_dict,
    proposal_of,
)
from agent.decisions import kept, set_aside, taken_off
from agent.deps import Deps
from agent.faults import NOT_FOUND
from agent.repair.types import Candidate, RepairContext
from agent.state import CheckData, FaultData, KeptPatch, LaunchRecord, SessionState
from tools.errors import PatchError
from tools.patches import EnvEdit, Patch, apply_patch
from tools.reverts import revert_stack


def predicted(fault: FaultData | None) -> bool:
    """A fault the scan predicted before any launch: with no repair it is left for the runs to confirm, and
    after its repair the scan looks again (agent/graph.py routes on this too)."""
    return fault is not None and fault.get("stage") == "scan"


def repair(state: SessionState, deps: Deps) -> dict[str, Any]:
    if state.get("outcome"):  # decided already (a patch that cannot be reverted): nothing more to try
        return {}
    fault = fault_from_dict(state.get("fault") or FaultData())
    if fault.exc_type == NOT_FOUND:  # no code to patch: a person installs the program or names it by its path
        deps.record("no_repair", "repair", {"fault": fault.summary, "why": "a program the job names is not there",
                                            "outcome": "not_found"})
        return {"candidates": [], "proposal": None, "outcome": "not_found",
                "outcome_detail": f"{fault.message}. Install it in the target env (--python), or name it by "
                                  "its path in the command"}
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
        if fault.fatal:
            why = (f"{fault.proc or 'a process of the job'} died of it, not of a Python exception: "
                   "no code patch is proposed for it")
        if predicted(state.get("fault")):  # a prediction, not a failure: the runs will tell
            deps.record("no_repair", "repair", {"fault": fault.summary, "why": why, "left_for": "the runs"})
            return {"candidates": [], "proposal": None}
        deps.record("no_repair", "repair", {"fault": fault.summary, "why": why})
        return {"candidates": [], "proposal": None, "outcome": "no_repair",
                "outcome_detail": f"{fault.summary} — {why}"}
    proposal = queue[0]
    deps.record("candidate", "repair", {"patch_id": proposal["patch"]["id"], "origin": proposal["origin"],
                                        "rationale": proposal["rationale"], "evidence": proposal["evidence"],
                                        "diff": patch_diff(proposal), "checks": proposal["checks"],
                                        "env": [EnvEdit.model_validate(e).describe()
                                                for e in proposal["patch"].get("env") or []],
                                        "host_steps": proposal["patch"].get("host_steps") or []})
    return {"candidates": queue, "proposal": proposal}


def apply(state: SessionState, deps: Deps) -> dict[str, Any]:
    proposal = proposal_of(state)
    cand = candidate_from_dict(proposal)
    ctx = deps.context(state)
    try:
        if cand.patch.host_steps and str(proposal.get("approved_by", "")).startswith("policy:"):
            run_host_steps(deps, cand.patch.id, cand.patch.host_steps)  # a person approved = a person did them
        if any(e.library and not e.value for e in cand.patch.env):
            cand = resolved(ctx, cand)
            proposal = {**proposal, "patch": patch_to_dict(cand.patch)}
        already = cand.patch.files and apply_patch(deps.host, cand.patch, roots=ctx.roots,
                                                   ledger_dir=deps.config.ledger_dir).already_applied
    except PatchError as err:  # stale, outside the roots, does not compile: nothing was written
        deps.record("patch_refused", "apply", {"patch_id": cand.patch.id, "why": str(err)})
        return set_aside(state, cand.patch.id)
    deps.record("applied", "apply", {"patch_id": cand.patch.id, "origin": cand.origin, "rationale": cand.rationale,
                                     "files": [f.path for f in cand.patch.files],
                                     "env": [e.describe() for e in cand.patch.env],
                                     "host_steps": list(cand.patch.host_steps),
                                     "already_applied": bool(already), "diff": cand.patch.diff})
    return kept(state, proposal)


# What apply and revert decide about the state, apart from what they do on the host: replay
# (agent/record/replay.py) makes the same updates from the recorded events through these.
def resolved(ctx: RepairContext, cand: Candidate) -> Candidate:
    """The env edits that name a library get its file, now that the host steps have installed it."""
    from agent.repair.context import LIBRARY_READ
    from agent.repair.derived_env import LIBRARY_MEMO, find_library

    for key in [k for k in ctx.memo if k.startswith((LIBRARY_MEMO, LIBRARY_READ))]:  # the host step may change them
        del ctx.memo[key]
    edits = []
    for edit in cand.patch.env:
        if edit.library and not edit.value:
            found = find_library(ctx, edit.library)
            if found is None:
                raise PatchError(f"{edit.library} is still not on {ctx.host.name} after "
                                 f"{'; '.join(cand.patch.host_steps)}: nothing was changed")
            edit = edit.model_copy(update={"value": found})
        edits.append(edit)
    return replace(cand, patch=cand.patch.model_copy(update={"env": tuple(edits)}))


def run_host_steps(deps: Deps, patch_id: str, steps: tuple[str, ...]) -> None:
    """A policy rule let medic change the host: run each step, stop at the first that fails."""
    for step in steps:
        result = deps.host.run(step, timeout=1800)
        deps.record("host_step", "apply", {"patch_id": patch_id, "step": step, "exit_code": result.exit_code})
        if not result.ok:
            raise PatchError(f"host step `{step}` failed (exit {result.exit_code}): "
                             f"{(result.stderr or result.stdout).strip()[-300:]}")


def verify(state: SessionState, deps: Deps) -> dict[str, Any]:
    """Checks that need no target-env process run now; the rest wait for the next launch's load."""
    cand = candidate_from_dict(proposal_of(state))
    results = run_before_checks(deps.context(state), cand, deps.config.target.env,
                                lambda result: deps.record("check", "verify", result))
    update: dict[str, Any] = {"verifications": [*(state.get("verifications") or []), *results]}
    if all(r["ok"] for r in results):
        update["pending_checks"] = queue_checks(state.get("pending_checks") or [],
                                                [check_to_dict(c) for c in cand.checks], cand.patch.id)
    return update


def queue_checks(pending: list[CheckData], checks: list[CheckData], patch_id: str) -> list[CheckData]:
    """The during-load checks of a patch join those already waiting for the next launch (several patches go
    before one launch), each named by its patch; a check already waiting is not queued twice (one import of a
    module proves it for every patch of that module)."""
    waiting = {check_from_dict(c).describe() for c in pending}
    return [*pending, *(with_owner(c, patch_id) for c in checks
                        if c.get("when") == "during_load" and check_from_dict(c).describe() not in waiting)]


def with_owner(check: CheckData, patch_id: str) -> CheckData:
    owned: CheckData = {**check, "patch_id": patch_id}
    return owned


def revert_index(patches: list[KeptPatch], run: LaunchRecord | None) -> int:
    """Which kept patch a revert undoes: the one whose check failed during the load, else the newest."""
    culprit = run.get("failed_patch") if run else None
    return next((i for i, p in enumerate(patches) if p["patch"].get("id") == culprit), len(patches) - 1)


def revert(state: SessionState, deps: Deps) -> dict[str, Any]:
    """Undo the last patch: its checks failed, or the fault it was for came back. Later patches stacked on its
    files come off first (they were made against its bytes), all or nothing; each is recorded as reverted."""
    patches = list(state.get("patches") or [])
    if not patches:
        return {}
    patch = Patch.model_validate(patches[revert_index(patches, state.get("run"))]["patch"])
    off = [patch.id]
    if patch.files:  # an env remedy wrote nothing: dropping it from the kept patches is its revert
        try:
            off = [r.patch_id for r in revert_stack(deps.host, patch.id, ledger_dir=deps.config.ledger_dir)]
        except PatchError as err:  # nothing was reverted: the files are as the last launch had them
            deps.record("warning", "revert", {"message": f"could not revert patch {patch.id}: {err}"})
            return {"proposal": None, "outcome": "no_repair",
                    "outcome_detail": f"patch {patch.id} did not cure its fault and cannot be reverted: {err}"}
    for pid in off:
        why = "its checks failed or its fault came back" if pid == patch.id else (
            f"it lies on patch {patch.id}'s file(s), which comes off")
        deps.record("reverted", "revert", {"patch_id": pid, "why": why, **({"above": patch.id} if pid != patch.id
                                                                            else {})})
    return taken_off(state, off)


def verify_passed(state: SessionState) -> bool:
    proposal = state.get("proposal")
    pid = proposal["patch"].get("id") if proposal else None
    mine = [v for v in state.get("verifications") or [] if v.get("patch_id") == pid and v["when"] == "before"]
    return all(v["ok"] for v in mine)
