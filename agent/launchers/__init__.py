"""Ways of running a job, behind one Protocol (base.Launcher): the graph's nodes ask the launcher the config
picks here, and never branch on how the job runs."""

from __future__ import annotations

from agent.launchers.base import Launcher, LauncherDeps
from agent.launchers.detached import DetachedLauncher
from agent.launchers.server import ServerLauncher
from agent.launchers.shard_runs import ShardRunsLauncher
from agent.launchers.slurm import SlurmLauncher
from agent.shards import sharding


def launcher_for(deps: LauncherDeps) -> Launcher:
    """The one place the config picks how launches run: Slurm jobs, detached shard runs, or one detached
    process; a two-process job's server wraps it (its client is never sharded into detached runs)."""
    config = deps.config
    inner: Launcher
    if config.slurm is not None:
        inner = SlurmLauncher(deps)
    elif sharding(config) is not None and not config.target.server_command:
        inner = ShardRunsLauncher(deps)
    else:
        inner = DetachedLauncher(deps)
    return ServerLauncher(deps, inner) if config.target.server_command else inner
