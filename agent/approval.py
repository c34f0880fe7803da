"""A person's answer to a proposed patch: approve, edit (a new diff, validated like any patch) or reject."""

from __future__ import annotations

from typing import Any

from agent.answers import LAUNCH_ACTIONS, LAUNCH_QUESTION, answered, entry
from agent.codec import patch_to_dict, proposal_of
from agent.decisions import set_aside
from agent.deps import Deps
from agent.patch_records import CandidateData, PatchData
from agent.state import SessionState
from tools.errors import PatchError, SessionError, UsageError
from tools.host import Host
from tools.patches import Patch, patch_from_diff, sha256

ACTIONS = ("approve", "edit", "reject")


def stale_files(host: Host, patch: PatchData) -> list[str]:
    """One line per file of ``patch`` (a Patch as dict) whose bytes are no longer those it was made from."""
    stale = []
    for file in patch.get("files", ()):
        path, expected = file["path"], file["sha256_before"]
        if host.stat(path) is None:
            stale.append(f"{path} no longer exists")
            continue
        digest = sha256(host.read_bytes(path))
        if digest != expected:
            stale.append(f"{path} changed (sha256 {digest[:12]}, the patch expects {expected[:12]})")
    return stale


def refuse_if_stale(host: Host, session_id: str, proposal: CandidateData) -> None:
    """An approval is of the diff a person read; if its file moved on, that diff is not what would be applied.

    The CLI calls this before it resumes anything, so a refused approval writes nothing and the patch stays
    pending: the person can reject it (medic then makes a fresh one) or put the file back.
    """
    patch = proposal["patch"]
    stale = stale_files(host, patch)
    if stale:
        raise SessionError(
            f"patch {patch.get('id')} of session {session_id} is stale: {'; '.join(stale)} since it was "
            f"proposed; nothing was written. Reject it (`medic approve {session_id} --reject stale`) "
            "and medic will propose a fresh one")


def answer_proposal(state: SessionState, deps: Deps, answer: Any) -> dict[str, Any]:
    proposal = proposal_of(state)
    if not isinstance(answer, dict) or answer.get("action") not in ACTIONS:
        raise UsageError(f"an approval answer is one of {', '.join(ACTIONS)}, not {answer!r}")
    action = answer["action"]
    patch_id = proposal["patch"].get("id", "")
    if action == "approve" and (stale := stale_files(deps.host, proposal["patch"])):
        # Not raised: LangGraph keeps a consumed resume value for a task that failed, so the next answer
        # would be ignored. Back to repair without marking it tried: the same patch is proposed again.
        deps.record("approval_refused", "approve", {"patch_id": patch_id, "why": "stale: " + "; ".join(stale),
                                                    "by": answer.get("by", "")})
        return {"proposal": None}
    if action == "edit":
        try:
            edited = edited_patch(deps.host, proposal, answer.get("diff") or "")
        except PatchError as err:
            said = entry(deps.clock(), proposal, answer, state.get("fault"))
            deps.record("approval_answer", "approve", {**said})
            deps.record("patch_refused", "approve", {"patch_id": patch_id, "why": f"edited diff: {err}"})
            return {**set_aside(state, patch_id), **answered(state, said)}
        answer = {**answer, "diff": edited.diff}
    said = entry(deps.clock(), proposal, answer, state.get("fault"))
    deps.record("approval_answer", "approve", {**said})
    if action == "approve":  # who approved decides who takes a host step: a policy lets medic run it
        return {"proposal": {**proposal, "approved_by": str(answer.get("by", ""))}, **answered(state, said)}
    if action == "reject":
        return {**set_aside(state, patch_id), **answered(state, said)}
    return {"proposal": {**proposal, "patch": patch_to_dict(edited), "origin": edited.origin},
            **answered(state, said)}


def answer_launch(state: SessionState, deps: Deps, answer: Any) -> dict[str, Any]:
    """The person's answer to LAUNCH_QUESTION: launch anyway (the runs will tell), edit the rejected diff into one
    they accept (applied and verified like any patch), or stop (the session ends ``rejected``)."""
    asked = proposal_of(state)
    if not isinstance(answer, dict) or answer.get("action") not in LAUNCH_ACTIONS:
        raise UsageError(f"the answer to '{LAUNCH_QUESTION}' is one of {', '.join(LAUNCH_ACTIONS)}, not {answer!r}")
    proposal: CandidateData = {k: v for k, v in asked.items() if k != "question"}  # type: ignore[assignment]
    edited = None
    if answer["action"] == "edit":
        try:
            edited = edited_patch(deps.host, proposal, answer.get("diff") or "")
        except PatchError as err:  # nothing written: the question stands
            deps.record("patch_refused", "approve", {"patch_id": asked["patch"].get("id"),
                                                     "why": f"edited diff: {err}"})
            return {"proposal": None}
        answer = {**answer, "diff": edited.diff}
    said = entry(deps.clock(), asked, answer, state.get("fault"))
    deps.record("approval_answer", "approve", {**said})
    update = {**answered(state, said), "proposal": None}
    if edited is not None:
        return {**update, "proposal": {**proposal, "patch": patch_to_dict(edited), "origin": edited.origin}}
    if answer["action"] == "reject":
        return {**update, "outcome": "rejected",
                "outcome_detail": f"{said.get('fault')} — {LAUNCH_QUESTION}: {said.get('by') or 'a person'} said "
                                  f"stop ({said.get('reason') or 'no reason given'})"}
    return update


def edited_patch(host: Host, proposal: CandidateData, diff: str) -> Patch:
    """The person's diff as a Patch pinned to the files as they are now (PatchError if it does not apply).

    Shared by the graph and the CLI, so a diff the CLI accepted is the one the graph applies.
    """
    patch = proposal["patch"]
    origin = proposal.get("origin") or patch.get("origin") or "unknown"
    return patch_from_diff(host, diff, rationale=proposal.get("rationale", "") + " (edited by a person)",
                           origin=origin if origin.endswith("+edited") else origin + "+edited",
                           evidence=tuple(proposal.get("evidence", ())), checks=tuple(patch.get("checks", ())))
