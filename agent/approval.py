"""A person's answer to a proposed patch: approve, edit (a new diff, validated like any patch) or reject."""

from __future__ import annotations

from typing import Any

from agent.deps import Deps
from agent.state import SessionState
from tools.errors import PatchError, UsageError
from tools.patches import patch_from_diff

ACTIONS = ("approve", "edit", "reject")


def answer_proposal(state: SessionState, deps: Deps, answer: Any) -> dict[str, Any]:
    proposal = dict(state.get("proposal") or {})
    if not isinstance(answer, dict) or answer.get("action") not in ACTIONS:
        raise UsageError(f"an approval answer is one of {', '.join(ACTIONS)}, not {answer!r}")
    action = answer["action"]
    patch_id = proposal.get("patch", {}).get("id")
    deps.record("approval_answer", "approve", {"patch_id": patch_id, "action": action,
                                               "reason": answer.get("reason", ""), "by": answer.get("by", "")})
    if action == "approve":
        return {}
    if action == "reject":
        return {"proposal": None, "tried": [*(state.get("tried") or []), patch_id]}
    try:
        edited = patch_from_diff(deps.host, answer["diff"], rationale=proposal["rationale"] + " (edited by a person)",
                                 origin=proposal["origin"] + "+edited", evidence=tuple(proposal.get("evidence", ())),
                                 checks=tuple(proposal["patch"].get("checks", ())))
    except PatchError as err:
        deps.record("patch_refused", "approve", {"patch_id": patch_id, "why": f"edited diff: {err}"})
        return {"proposal": None, "tried": [*(state.get("tried") or []), patch_id]}
    proposal["patch"] = edited.model_dump(mode="json")
    return {"proposal": proposal}
