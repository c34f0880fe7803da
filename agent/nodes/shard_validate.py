"""validate, for a sharded Slurm session: every shard this launch ran is checked on its own (the command's and the
validator's ``{shard}`` is its index, ``MEDIC_SHARD`` too), and a verified shard is never run again. The session
is verified only once every shard is; the first shard whose output is wrong is the fault, like any other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agent.config import SessionConfig
from agent.deps import Deps
from agent.state import LaunchRecord, SessionState
from tools.slurm import SHARD_PLACEHOLDER, with_shard


def config_for_shard(config: SessionConfig, shard: int) -> SessionConfig:
    target = config.target
    return config.model_copy(update={"target": target.model_copy(update={
        "command": with_shard(target.command, shard),
        "validate_command": with_shard(target.validate_command, shard) if target.validate_command else None,
        "output": target.output.replace(SHARD_PLACEHOLDER, str(shard)) if target.output else None,
        "env": {**target.env, "MEDIC_SHARD": str(shard),
                "MEDIC_SHARDS": str(config.slurm.shards if config.slurm else 1)},
    })})


def validate_shards(state: SessionState, deps: Deps,
                    validate_one: Callable[[SessionState, Deps], dict[str, Any]]) -> dict[str, Any]:
    record: LaunchRecord = dict(state.get("run") or {})  # type: ignore[assignment]
    total = deps.config.slurm.shards if deps.config.slurm else 1
    verified = list(state.get("verified_shards") or [])
    one_state: SessionState = {**state, "run": {**record, "shards": []}}
    last: dict[str, Any] = {}
    for shard in record.get("shards") or []:
        if shard in verified:
            continue
        last = validate_one(one_state, replace(deps, config=config_for_shard(deps.config, shard)))
        ok = last.get("outcome") == "verified"
        deps.record("shard", "validate", {"shard": shard, "verified": ok, "launch": record.get("n"),
                                          "of": total, "detail": str(last.get("outcome_detail") or "")[:300]})
        if not ok:  # a wrong output (a fault to repair), or one nothing could read
            return {**last, "verified_shards": sorted(verified)}
        verified.append(shard)
    verified.sort()
    if len(verified) >= total:
        return {"validation": last.get("validation"), "verified_shards": verified, "outcome": "verified",
                "outcome_detail": f"all {total} shards verified; the last: {last.get('outcome_detail') or ''}"}
    return {"validation": last.get("validation"), "verified_shards": verified, "fault": None}  # the rest next


def replay_shard(state: dict[str, Any], data: dict[str, Any], rest: Sequence[Any], *, after_fault: bool) -> bool:
    """What a recorded ``shard`` event did to the state (agent/replay.py); True when validate's router chose next."""
    if data.get("verified"):
        state["verified_shards"] = sorted({*(state.get("verified_shards") or []), int(data["shard"])})
    if rest and rest[0].kind == "validate":
        return False  # the next shard of the same pass
    if not data.get("verified"):
        if after_fault:
            return False  # a wrong output: the fault's own path
        state.update(outcome="unverified", outcome_detail=str(data.get("detail", "")))
    elif len(state["verified_shards"]) >= int(data.get("of") or 1):
        state.update(outcome="verified", outcome_detail=str(data.get("detail", "")))
    else:
        state.update(fault=None)  # the rest of the shards are next
    return True
