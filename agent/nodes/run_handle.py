"""One interface for watch over how a launch runs: a detached process on the host (tools/runs.py), the client of
a two-process job, one per shard (agent/nodes/shard_runs.py), or a Slurm job (agent/nodes/slurm_launch.py).
Follow the log by offset, ask the state, stop it, and say how it ended."""

from __future__ import annotations

from typing import Protocol

from agent.deps import Deps
from agent.state import LaunchRecord
from tools import runs, server_job


class RunHandle(Protocol):
    def follow(self, offset: int) -> runs.LogChunk: ...

    def ended_hint(self) -> bool: ...  # cheap: has it (or its lead shard) written its exit code?

    def status(self) -> runs.RunStatus: ...

    def stop(self) -> None: ...

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str: ...


class DetachedHandle:
    def __init__(self, deps: Deps, record: LaunchRecord) -> None:
        self.deps, self.run = deps, runs.Run.in_dir(record["run_dir"])

    def follow(self, offset: int) -> runs.LogChunk:
        return runs.follow(self.deps.host, self.run, offset)

    def ended_hint(self) -> bool:
        return self.deps.host.exists(self.run.exit)

    def status(self) -> runs.RunStatus:
        return runs.status(self.deps.host, self.run)

    def stop(self) -> None:
        runs.stop(self.deps.host, self.run)

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str:
        record["exit_code"] = status.exit_code
        return "exited" if status.exit_code == 0 else "crashed"


class ClientHandle(DetachedHandle):
    """The client of a two-process job. Its server ending ends it too: a client retrying a dead server waits out
    its own timeouts, and the server's traceback, which diagnose reads, is already written."""

    def __init__(self, deps: Deps, record: LaunchRecord) -> None:
        super().__init__(deps, record)
        self.server = runs.Run.in_dir(record["server_run_dir"])

    def status(self) -> runs.RunStatus:
        status = super().status()
        if status.state == "running" and not server_job.alive(self.deps.host, self.server):
            self.deps.record("warning", "watch", {"message": "the server ended under its client: client stopped"})
            self.stop()
            status = super().status()
        return status


def run_handle(deps: Deps, record: LaunchRecord) -> RunHandle:
    if record.get("job_id"):
        from agent.nodes.slurm_launch import SlurmHandle

        return SlurmHandle(deps, record)
    if record.get("shard_runs"):
        from agent.nodes.shard_runs import ShardRunsHandle

        return ShardRunsHandle(deps, record)
    if record.get("server_run_dir"):
        return ClientHandle(deps, record)
    return DetachedHandle(deps, record)


def log_path(record: LaunchRecord) -> str:
    """The log diagnose reads: the run's, or the failed (else the first) shard's of a Slurm job or of shard runs."""
    folder = record["run_dir"].rstrip("/")
    if not record.get("shards") or not (record.get("job_id") or record.get("shard_runs")):
        return f"{folder}/log"
    shard = record.get("failed_shard")
    shard = shard if shard is not None else record["shards"][0]
    if record.get("shard_runs"):
        return f"{(record.get('shard_runs') or {})[str(shard)].rstrip('/')}/log"
    return f"{folder}/log.{shard}"
