"""launch: start the next launch (the canary's until it passed, then the target's), once per launch id whatever
the checkpoint says; a CPU job's target starts beside its canary (agent/launchers/beside.py). How it runs — a
detached process, shard runs, a Slurm job, a server and its client — is the session's launcher
(agent/launchers/), which ledgers it on the host so a resumed session reattaches to it."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, cast

from agent.deps import Deps
from agent.job import canary_commands, canary_env, canary_ready, in_target_env, on_canary
from agent.launchers.base import LaunchPlan
from agent.launchers.beside import canary_yields
from agent.launchers.detached import DetachedLauncher
from agent.remedies import arg_edits, with_options
from agent.repair.scan_env import target_device
from agent.shards import shards_for
from agent.state import SessionState
from agent.validation import before_relaunch, nothing_left
from agent.wrong_output import set_aside


def launch(state: SessionState, deps: Deps) -> dict[str, Any]:
    kind = "canary" if on_canary(state, deps.config) else "target"
    plan = planned(state, deps, kind, len(state.get("launches") or []) + 1)
    beside, aside = None, None
    if kind == "canary" and may_overlap(state, deps):  # the target's load goes on while the canary runs
        launcher = cast(DetachedLauncher, deps.launcher)
        aside = wrong_output_aside(state, deps)
        beside = launcher.start_beside(state, planned(state, deps, "target", plan.n + 1))
        plan = replace(plan, trace_extra={**plan.trace_extra, "target_beside": beside})
    elif kind == "target":
        aside = wrong_output_aside(state, deps)
    if aside:
        plan = replace(plan, trace_extra={**plan.trace_extra, "wrong_output_set_aside": aside})
    update = deps.launcher.start(state, plan)
    if beside:
        update["run"]["target_beside"] = beside  # the same record as the last of update["launches"]
        canary_yields(deps.host, update["run"]["run_dir"])
    if state.get("wrong_output") and (kind == "target" or beside):
        update["wrong_output"] = None
    return update


def wrong_output_aside(state: SessionState, deps: Deps) -> dict[str, Any] | None:
    """The wrong output of the last target launch moved aside before the next one (agent/wrong_output.py)."""
    output = state.get("wrong_output")
    launches = [launch["n"] for launch in state.get("launches") or [] if launch["kind"] == "target"]
    return set_aside(deps.host, output, launches[-1] if launches else None) if output else None


def may_overlap(state: SessionState, deps: Deps) -> bool:
    """Whether this canary launch may have the target started beside it (agent/launchers/beside.py): a CPU job run
    as one detached process, whose canary writes apart, with no person to confirm each launch."""
    cfg = deps.config
    canary = (state.get("preflight") or {}).get("canary") or {}
    return bool(cfg.overlap and canary.get("outputs") and not cfg.confirm_launch
                and type(deps.launcher) is DetachedLauncher and target_device(deps.context(state)) == "cpu")


def planned(state: SessionState, deps: Deps, kind: str, n: int) -> LaunchPlan:
    cfg = deps.config
    command = canary_commands(state, cfg)[0] if kind == "canary" else cfg.target.command
    # the kept option remedies, as the env remedies, go to the canary's runs too: the same library meets them
    command = with_options(command or [], arg_edits(state.get("patches") or []))
    if kind == "canary" and not cfg.target.canary_command:
        canary_ready(deps)  # built while the scan ran (preflight started it)
    # `python ...`, `speculators ...` mean the target env's, not the ones first on the host's PATH
    command, resolved = in_target_env(deps.host, command or [], cfg.target)
    return LaunchPlan(n=n, kind=kind, command=command, started=deps.clock(), trace_extra=resolved,
                      env=canary_env(state, cfg) if kind == "canary" else {},
                      plan_shards=partial(plan_shards, state, deps, kind))


def plan_shards(state: SessionState, deps: Deps, kind: str) -> tuple[list[int], dict[str, Any]]:
    """The shards a fresh launch runs: shards that finished while another crashed are validated first (a verified
    one never runs again); the update records them."""
    state, update = before_relaunch(state, deps, kind)
    shards = shards_for(state, deps.config, kind)
    nothing_left(deps, kind, shards)
    return shards, update
