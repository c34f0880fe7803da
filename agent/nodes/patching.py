"""repair, apply, verify, revert: from a fault to a patch on disk that has been checked.

One side effect per node: apply writes files, revert restores them; both go through tools/patches, whose
host-side ledger makes a repeated call (a resumed session) a no-op.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from agent.answers import (
    LAUNCH_QUESTION,
    content_of,
    declined_by_a_person,
    launch_chosen,
    launch_question,
    rejected_contents,
    why_nothing_left,
)
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
from agent.job import job_model_folder, seen_through
from agent.launch_records import LaunchRecord
from agent.outcomes import NO_REASON
from agent.patch_records import CheckData, FaultData, KeptPatch
from agent.repair.limits import InterfaceLimit, guard_of, limit_for, own_refusal
from agent.repair.limits_platform import platform_only_name
from agent.repair.limits_values import refused_value
from agent.repair.limits_weights import config_field, missing_key, unbuilt_weight, unset_field
from agent.repair.types import Candidate, Fault, RepairContext
from agent.state import SessionState
from tools.errors import PatchError
from tools.fatal import LIBRARY_ERRORS
from tools.model_folder import architectures
from tools.patches import ArgEdit, EnvEdit, Patch, apply_patch
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
    tried, declined = list(state.get("tried") or []), list(state.get("declined") or [])
    cap = deps.config.budgets.max_candidates_per_fault
    queue = [c for c in state.get("candidates") or [] if c["patch"]["id"] not in tried]
    seen = list(state.get("candidates") or [])
    rejected = rejected_contents(state)
    # a limit the installed library proves comes first: nothing is proposed for it, however a search would end
    limit = None if tried or seen or fault.fatal else library_limit(state, deps, fault)
    ctx = deps.context(state)
    if limit is None and not queue:  # a search: what the model's own config asks may be what the fault is about
        ctx.model_dir = model_folder(state, deps)
    while limit is None and not queue and len(tried) < cap:
        found = [candidate_to_dict(c) for c in deps.engine.candidates(ctx, fault, skip=frozenset(tried))]
        for note in deps.engine.notes:
            deps.record("warning", "repair", {"message": note})
        seen += found
        for cand in found:  # a diff a person rejected in this session is not proposed again, under any id
            if (same := rejected.get(content_of(cand))) is not None:
                deps.record("not_proposed", "repair", {"patch_id": cand["patch"]["id"], "same_as": same,
                                                       "why": f"the diff a person rejected as patch {same}"})
                tried, declined = [*tried, cand["patch"]["id"]], [*declined, cand["patch"]["id"]]
            else:
                queue.append(cand)
        if not found or queue:
            break
    progress: dict[str, Any] = {"tried": tried, "declined": declined, "candidates": seen}
    state = cast(SessionState, {**state, **progress})
    if limit is not None or not queue or len(tried) >= cap:
        why = ((deps.engine.stop_reason or NO_REASON) if not tried
               else why_nothing_left(state, len(tried)))
        if fault.fatal:
            why = (f"{fault.proc or 'a process of the job'} died of it, not of a Python exception: "
                   "no code patch is proposed for it") if not raised_as_exception(fault) else (
                   f"{fault.proc or 'a process of the job'} died of it where the call was made, or later (a "
                   "kernel's error surfaces at a later call): no repair proved that call cannot work on this host")
        if limit is not None:  # what the stop proved: the installed library cannot, whatever the job does
            why = limit.sentence()
        elif not (tried or fault.fatal or deps.engine.stop_reason):  # else at least where the library refused
            why = (own_refusal(ctx, fault) or refused_value(ctx, fault) or platform_only_name(ctx, fault)
                   or model_disagrees(deps, ctx, fault) or why)
        elif tried and not fault.fatal and not declined_by_a_person(state):  # they failed against its refusal
            why = own_refusal(ctx, fault, tried=len(tried)) or why
        if predicted(state.get("fault")) and limit is None:  # a prediction, not a failure: the runs will tell
            asked = launch_question(state)
            if asked is not None:  # but a person said no to its repair: launching into it is theirs to say
                deps.record("no_repair", "repair", {"fault": fault.summary, "why": why, "asks": LAUNCH_QUESTION,
                                                    "patch_id": asked["patch"]["id"]})
                return {**progress, "proposal": asked}
            chose = launch_chosen(state)
            left = f"the runs ({chose.get('by')} chose to launch anyway)" if chose else "the runs"
            deps.record("no_repair", "repair", {"fault": fault.summary, "why": why, "left_for": left})
            return {**progress, "candidates": [], "proposal": None}
        ends = "rejected" if declined_by_a_person(state) else "no_repair"  # a person's no ends it as theirs
        deps.record("no_repair", "repair", {"fault": fault.summary, "why": why, "outcome": ends})
        # it names the real error itself (not asked when a limit came first: its reason is another fault's)
        proven = deps.engine.stop_reason if not tried and limit is None else None
        return {**progress, "candidates": [], "proposal": None, "outcome": ends,
                "outcome_detail": proven or f"{fault.summary} — {why}"}
    proposal = queue[0]
    deps.record("candidate", "repair", {"patch_id": proposal["patch"]["id"], "origin": proposal["origin"],
                                        "rationale": proposal["rationale"], "evidence": proposal["evidence"],
                                        "diff": patch_diff(proposal), "checks": proposal["checks"],
                                        "env": [EnvEdit.model_validate(e).describe()
                                                for e in proposal["patch"].get("env") or []],
                                        "host_steps": proposal["patch"].get("host_steps") or [],
                                        "args": [ArgEdit.model_validate(a).describe()
                                                 for a in proposal["patch"].get("args") or []]})
    return {**progress, "proposal": proposal}


def model_disagrees(deps: Deps, ctx: RepairContext, fault: Fault) -> str | None:
    """The model folder's checkpoint holds a weight its own config tells the library not to build, or its config
    lacks a field the library's model class reads."""
    asks = missing_key(fault) or config_field(fault)
    folder = job_model_folder(deps.config.target, deps.host) if asks else None  # read only then
    path = folder.path if folder else None
    return unbuilt_weight(ctx, fault, path) or unset_field(ctx, fault, path)


def model_folder(state: SessionState, deps: Deps) -> str:
    """The job's model folder: where the job's command names it, else where its server's does."""
    target = seen_through(deps.config.target, state)
    folder = job_model_folder(target, deps.host) or (
        job_model_folder(target.model_copy(update={"command": list(target.server_command)}), deps.host)
        if target.server_command else None)
    return folder.path if folder else ""


def library_limit(state: SessionState, deps: Deps, fault: Fault) -> InterfaceLimit | None:
    """Asked of every new fault: the model folder is read only for one that ends under a capability guard."""
    ctx = deps.context(state)
    guard = guard_of(ctx, fault)
    if guard is None:
        return None
    folder = job_model_folder(deps.config.target, deps.host)
    ctx.architectures = architectures(deps.host, folder.path) if folder else ()
    return limit_for(ctx, guard)


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
                                     "args": [a.describe() for a in cand.patch.args],
                                     "already_applied": bool(already), "diff": cand.patch.diff})
    return kept(state, proposal)


# What apply and revert decide about the state, apart from what they do on the host: replay
# (agent/readers/replay.py) makes the same updates from the recorded events through these.
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


def raised_as_exception(fault: Fault) -> bool:
    """A library's error (a CUDA error) that came with the stack of the Python exception it was raised as."""
    return bool(fault.frames) and fault.exc_type in {kind for _, kind, _ in LIBRARY_ERRORS}
