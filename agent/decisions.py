"""What becomes of a proposed patch, as a state update: kept, set aside, or taken off.

The nodes that decide (apply, revert), a person's answer (agent/approval.py) and replay (agent/readers/replay.py)
all make their updates here, so a replayed session's state is the one the session had.
"""

from __future__ import annotations

from typing import Any

from agent.patch_records import CandidateData, KeptPatch
from agent.state import SessionState


def kept(state: SessionState, proposal: CandidateData) -> dict[str, Any]:
    """An applied patch joins the kept ones (once: an approve-mode edit replaces it), answering the newest fault."""
    entry: KeptPatch = {**proposal, "fault_index": len(state.get("faults") or []) - 1}
    patches = [p for p in state.get("patches") or [] if p["patch"]["id"] != proposal["patch"].get("id")]
    return {"patches": [*patches, entry], "proposal": proposal}


def set_aside(state: SessionState, patch_id: str) -> dict[str, Any]:
    """A patch that was refused or rejected: tried for this fault, and no longer proposed."""
    return {"tried": [*(state.get("tried") or []), patch_id], "proposal": None}


def taken_off(state: SessionState, off: list[str]) -> dict[str, Any]:
    """Reverted patches: no longer kept, tried for this fault, and their checks no longer wait for a launch."""
    pending = [c for c in state.get("pending_checks") or [] if c.get("patch_id") not in off]
    return {"patches": [p for p in state.get("patches") or [] if p["patch"]["id"] not in off],
            "tried": [*(state.get("tried") or []), *off], "proposal": None, "pending_checks": pending}
