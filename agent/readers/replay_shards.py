"""Replay of a sharded session's ``shard`` events: what each did to the state, as validate's shard loop does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.run_payloads import ShardData
from agent.state import SessionState


def replay_shard(state: SessionState, data: ShardData, rest: Sequence[Any], *, after_fault: bool) -> bool:
    """What a recorded ``shard`` event did to the state (agent/readers/replay.py); True when validate's router
    chose next."""
    if data.get("verified"):
        state["verified_shards"] = sorted({*(state.get("verified_shards") or []), int(data.get("shard") or 0)})
    if data.get("before_launch"):
        return False  # a finished shard checked before a relaunch: no router
    if rest and rest[0].kind == "validate":
        return False  # the next shard of the same pass
    if not data.get("verified"):
        if after_fault:
            return False  # a wrong output: the fault's own path
        state.update({"outcome": "unverified", "outcome_detail": str(data.get("detail", ""))})
    elif len(state.get("verified_shards") or []) >= int(data.get("of") or 1):
        state.update({"outcome": "verified", "outcome_detail": str(data.get("detail", ""))})
    else:
        state["fault"] = None  # the rest of the shards are next
    return True
