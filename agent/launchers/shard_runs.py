"""Shards as detached runs (``medic run --shards N`` without ``--scheduler slurm``): one run of tools/runs.py per
shard on the job's host, each with its index for the command's ``{shard}`` and in ``MEDIC_SHARD``. What shards
run, their validation and their relaunch are the same as a Slurm job array's (agent/shards.py,
agent/validation.py); only the start and the watch differ:

    runs/L<n>/s<k>/<id>/     shard k's run of launch n (its log, pid and exit, as any detached run)
    launches/L<n>.json       the launch's plan (its shards), written before the first shard starts
    launches/shards/L<n>.s<k>.json  shard k's run folder, written once it started

so a medic that died at any point of a launch reattaches to the shards that started and starts only the others.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from agent.launch_records import LaunchRecord, ShardRunsLaunch
from agent.launchers.base import (
    LauncherDeps,
    LaunchPlan,
    RunHandle,
    ipc_variables,
    job_environment,
    launched_before,
    write_ledger,
)
from agent.launchers.detached import DetachedLauncher
from agent.launchers.shard_logs import explaining_shard
from agent.remedies import with_unset
from agent.shards import total
from agent.state import SessionState
from tools import runs
from tools.host import Host
from tools.slurm import with_shard


class ShardRunsLauncher(DetachedLauncher):
    """A target launch of a sharded session runs its shards as detached runs; the canary runs as one."""

    def start(self, state: SessionState, plan: LaunchPlan, env_base: dict[str, str] | None = None
              ) -> dict[str, Any]:
        if plan.kind != "target":
            return super().start(state, plan, env_base)
        deps, cfg, host = self.deps, self.deps.config, self.deps.host
        n, base, ledger = plan.n, plan.base(cfg), plan.ledger(cfg)
        update: dict[str, Any] = {}
        host.run(["mkdir", "-p", f"{cfg.host_dir}/launches/shards"], timeout=30)
        planned = planned_before(host, ledger)
        if planned is None:
            planned, update = plan.plan_shards()
            write_ledger(host, ledger, {"n": n, "run": base, "shards": planned})
        env, unset = job_environment(deps, state, env_base, plan.env)
        folders: dict[str, str] = {}
        reattached: list[int] = []
        for shard in planned:
            shard_ledger = f"{cfg.host_dir}/launches/shards/L{n}.s{shard}.json"
            folder = launched_before(host, f"{base}/s{shard}", shard_ledger)
            if folder:  # started before medic died: never a second run of it
                reattached.append(shard)
            else:
                run = runs.launch(host, with_unset(with_shard(plan.command, shard), unset),
                                  run_dir=f"{base}/s{shard}", cwd=cfg.target.workdir,
                                  env={**env, "MEDIC_SHARD": str(shard), "MEDIC_SHARDS": str(total(cfg))},
                                  ipc_vars=ipc_variables(deps))
                write_ledger(host, shard_ledger, {"n": n, "shard": shard, "run": run.dir})
                folder = run.dir
            folders[str(shard)] = folder
        deps.record("launch", "launch", {"n": n, "kind": plan.kind, "run_dir": base, "shards": planned,
                                         "shard_runs": folders,
                                         **({"reattached": True, "reattached_shards": reattached} if reattached
                                            else {"command": plan.command, **plan.trace_extra})})
        record: ShardRunsLaunch = {**plan.fields(), "launcher": "shard_runs", "run_id": f"L{n}", "run_dir": base,
                                   "shards": planned, "shard_runs": folders}
        return {**update, "launches": [*(state.get("launches") or []), record], "run": record}

    def handle(self, record: LaunchRecord) -> RunHandle:
        return ShardRunsHandle(self.deps, record) if record["launcher"] == "shard_runs" else super().handle(record)

    def log_of(self, record: LaunchRecord) -> str:
        """The failed (else the first) shard's log."""
        if record["launcher"] != "shard_runs" or not record["shards"]:
            return super().log_of(record)
        shard = record.get("failed_shard")
        shard = shard if shard is not None else record["shards"][0]
        return f"{record['shard_runs'][str(shard)].rstrip('/')}/log"


def planned_before(host: Host, ledger: str) -> list[int] | None:
    """The shards of a launch that began before medic died (its ledger line), else None."""
    if not host.exists(ledger):
        return None
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return [int(k) for k in json.loads(host.read_bytes(ledger))["shards"]]
    return None


class ShardRunsHandle:
    """watch's view of a launch's shard runs: the lead shard's log, every shard's state; the launch ends once
    every shard has (a shard that crashed does not stop the others: one that finishes is not run again)."""

    def __init__(self, deps: LauncherDeps, record: ShardRunsLaunch) -> None:
        self.deps = deps
        self.runs = {int(k): runs.Run.in_dir(folder) for k, folder in record["shard_runs"].items()}
        self.lead = min(self.runs)
        self.last: dict[int, runs.RunStatus] = {}

    def follow(self, offset: int) -> runs.LogChunk:
        return runs.follow(self.deps.host, self.runs[self.lead], offset)

    def ended_hint(self) -> bool:
        """Has the first shard not yet seen ended written its exit code? (one file, however many shards)"""
        left = [k for k in self.runs if k not in self.last or self.last[k].state == "running"]
        return not left or self.deps.host.exists(self.runs[left[0]].exit)

    def status(self) -> runs.RunStatus:
        for shard, run in self.runs.items():
            if self.last.get(shard, runs.RunStatus("running")).state == "running":
                self.last[shard] = runs.status(self.deps.host, run)
        if any(s.state == "running" for s in self.last.values()):
            return runs.RunStatus("running")
        failed = [s for s in self.last.values() if s.exit_code != 0]
        return runs.RunStatus("exited", failed[0].exit_code if failed else 0)

    def stop(self) -> None:
        runs.stop_all(self.deps.host, list(self.runs.values()))

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str:
        assert record["launcher"] == "shard_runs"  # the record this handle was made for
        ended = {k: self.last.get(k) or runs.status(self.deps.host, run) for k, run in self.runs.items()}
        record["shard_states"] = {str(k): shard_state(s) for k, s in sorted(ended.items())}
        failed = sorted(k for k, s in ended.items() if shard_state(s) != "COMPLETED")
        if not failed:
            record["exit_code"] = 0
            return "exited"
        # several failed: the one whose own log explains it (the others may only say "see above")
        shard = explaining_shard(self.deps, {k: self.runs[k].log for k in failed}) if len(failed) > 1 else failed[0]
        record["failed_shard"], record["exit_code"] = shard, ended[shard].exit_code
        return "crashed"


def shard_state(status: runs.RunStatus) -> str:
    """A shard run's end in Slurm's words, so a relaunch reads both kinds of shard the same way."""
    if status.state == "running":
        return "RUNNING"
    if status.state == "vanished":
        return "VANISHED"
    return "COMPLETED" if status.exit_code == 0 else "FAILED"
