"""validate, for a sharded session (a Slurm job array, or detached shard runs): every shard this launch ran is
checked on its own (the command's and the validator's ``{shard}`` is its index, ``MEDIC_SHARD`` too), and a verified
shard is never run again. The session is verified only once every shard is; the first shard whose output is wrong
is the fault, like any other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agent.config import SessionConfig
from agent.deps import Deps
from agent.shards import total
from agent.state import LaunchRecord, SessionState
from tools.errors import RunError
from tools.slurm import SHARD_PLACEHOLDER, with_shard


def config_for_shard(config: SessionConfig, shard: int) -> SessionConfig:
    target = config.target
    return config.model_copy(update={"target": target.model_copy(update={
        "command": with_shard(target.command, shard),
        "validate_command": with_shard(target.validate_command, shard) if target.validate_command else None,
        "output": target.output.replace(SHARD_PLACEHOLDER, str(shard)) if target.output else None,
        "env": {**target.env, "MEDIC_SHARD": str(shard),
                "MEDIC_SHARDS": str(total(config))},
    })})


def validate_shards(state: SessionState, deps: Deps,
                    validate_one: Callable[[SessionState, Deps], dict[str, Any]]) -> dict[str, Any]:
    record: LaunchRecord = dict(state.get("run") or {})  # type: ignore[assignment]
    count = total(deps.config)
    verified = list(state.get("verified_shards") or [])
    last: dict[str, Any] = {}
    for shard in record.get("shards") or []:
        if shard in verified:
            continue
        # a shard run's own folder: its output must be newer than its start (validate.stale_output)
        folder = (record.get("shard_runs") or {}).get(str(shard)) or record.get("run_dir", "")
        one_state: SessionState = {**state, "run": {**record, "shards": [], "run_dir": folder}}
        last = validate_one(one_state, replace(deps, config=config_for_shard(deps.config, shard)))
        ok = last.get("outcome") == "verified"
        deps.record("shard", "validate", {"shard": shard, "verified": ok, "launch": record.get("n"),
                                          "of": count, "detail": str(last.get("outcome_detail") or "")[:300]})
        if not ok:  # a wrong output (a fault to repair), or one nothing could read
            return {**last, "verified_shards": sorted(verified)}
        verified.append(shard)
    if len(verified) < count:  # shards that finished in an earlier launch count too (a resumed launch skips its check)
        done: SessionState = {**state, "verified_shards": verified}
        verified += verify_finished(done, deps, finished_unverified(done), validate_one)
    verified.sort()
    if len(verified) >= count:
        return {"validation": last.get("validation"), "verified_shards": verified, "outcome": "verified",
                "outcome_detail": f"all {count} shards verified; the last: {last.get('outcome_detail') or ''}"}
    return {"validation": last.get("validation"), "verified_shards": verified, "fault": None}  # the rest next


def replay_shard(state: SessionState, data: dict[str, Any], rest: Sequence[Any], *, after_fault: bool) -> bool:
    """What a recorded ``shard`` event did to the state (agent/record/replay.py); True when validate's router
    chose next."""
    if data.get("verified"):
        state["verified_shards"] = sorted({*(state.get("verified_shards") or []), int(data["shard"])})
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


def finished_unverified(state: SessionState) -> list[int]:
    """Shards that ran to exit 0 in an earlier launch (one where another shard crashed) but were never validated."""
    verified = set(state.get("verified_shards") or [])
    done = {int(k) for launch in state.get("launches") or [] if launch.get("kind", "target") == "target"
            for k, s in (launch.get("shard_states") or {}).items() if s == "COMPLETED"}
    return sorted(done - verified)


def verify_finished(state: SessionState, deps: Deps, shards: list[int],
                    validate_one: Callable[[SessionState, Deps], dict[str, Any]]) -> list[int]:
    """Before a relaunch: which of ``shards`` (finished, never validated) have a verified output, so they are not
    run again. One that is not verified just runs again: its fault, if any, shows there (nothing is recorded as one)."""
    ok: list[int] = []
    for shard in shards:
        quiet = replace(deps, config=config_for_shard(deps.config, shard))
        setattr(quiet, "record", lambda *args, **kwargs: None)  # noqa: B010  the verdict is the shard event below
        one_state: SessionState = {**state, "run": {"kind": "target", "shards": []}}
        verified = validate_one(one_state, quiet).get("outcome") == "verified"
        deps.record("shard", "launch", {"shard": shard, "verified": verified, "before_launch": True,
                                        "of": total(deps.config)})
        if verified:
            ok.append(shard)
    return ok


def before_relaunch(state: SessionState, deps: Deps, kind: str) -> tuple[SessionState, dict[str, Any]]:
    """Shards that finished while another crashed are checked before a target relaunch: a verified one is not run
    again. The state the launch plans from, and the update that records them."""
    if kind != "target" or total(deps.config) <= 1:
        return state, {}
    from agent.nodes.validate import validate

    more = verify_finished(state, deps, finished_unverified(state), validate)
    if not more:
        return state, {}
    verified = sorted({*(state.get("verified_shards") or []), *more})
    return {**state, "verified_shards": verified}, {"verified_shards": verified}


def nothing_left(deps: Deps, kind: str, shards: list[int]) -> None:
    if kind == "target" and total(deps.config) > 1 and not shards:
        raise RunError("every shard is verified already: nothing left to launch")
