"""A launch as the graph state holds it: one record shape per launcher (told apart by ``launcher``), and a
two-process job's server starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Required, TypedDict, cast

from agent.patch_records import CheckResult


class ClientOf(TypedDict):
    """A client run of a two-process job (agent/launchers/server.py wraps any launcher): the server it ran against."""

    server: int  # that server's load (ServerRecord n)
    run_dir: str  # that server's run folder: a client whose server ended has ended too
    log_offset: int  # the size of that server's log when the client started (its part of the log)


class LaunchBase(TypedDict, total=False):
    """What every launch has, however it runs."""

    n: Required[int]  # 1-based, one count for the session's launches of every kind
    kind: Required[str]  # "target" | "canary" | "server" (a server that ended before it was ready)
    run_id: str
    run_dir: str
    started: float
    ended: float
    exit_code: int | None
    outcome: str  # "crashed" | "exited" | "stopped:<why>" | "timeout" | "scheduler:<STATE>"
    phases: dict[str, float]  # phase -> seconds since launch when it began
    load_seconds: float | None
    checks_during_load: list[CheckResult]
    failed_patch: str | None  # the patch whose during-load check failed and stopped this launch
    client_of: ClientOf  # a two-process job's client run
    target_beside: str  # a canary's: the run folder of the target started beside it (agent/launchers/beside.py)


class DetachedLaunch(LaunchBase, total=False):
    """One detached process on the job's host (agent/launchers/detached.py)."""

    launcher: Required[Literal["detached"]]


class SlurmLaunch(LaunchBase, total=False):
    """A Slurm job, or job array (agent/launchers/slurm.py)."""

    launcher: Required[Literal["slurm"]]
    job_id: Required[str]
    shards: list[int]  # the array's task ids this launch ran (a sharded session); empty for a plain job
    shard_states: dict[str, str]  # shard -> Slurm state at the end ("COMPLETED", "FAILED", "TIMEOUT", …)
    scheduler_state: str  # the state that decided the outcome (the worst of the shards')
    scheduler_reason: str
    failed_shard: int | None  # the shard whose log diagnose reads


class ShardRunsLaunch(LaunchBase, total=False):
    """A sharded launch as one detached run per shard (agent/launchers/shard_runs.py)."""

    launcher: Required[Literal["shard_runs"]]
    shards: Required[list[int]]
    shard_runs: Required[dict[str, str]]  # shard -> its run folder
    shard_states: dict[str, str]  # shard -> COMPLETED, FAILED, VANISHED (Slurm's words, so relaunches read both)
    failed_shard: int | None


# One shape per launcher, told apart by ``launcher``: a field one way of running has is never read off another.
LaunchRecord = DetachedLaunch | SlurmLaunch | ShardRunsLaunch


def launch_record(raw: Mapping[str, Any]) -> LaunchRecord:
    """A launch record from plain data: a launch event's (replay), or a record written before records had a
    ``launcher`` (a checkpoint of an older medic, resumed). What it holds says which launcher made it."""
    data = {k: v for k, v in raw.items() if k in LAUNCH_KEYS}
    data.setdefault("n", 0)
    data.setdefault("kind", "target")
    if raw.get("server_run_dir"):  # the older flat fields of a client run
        data["client_of"] = {"server": int(raw.get("server") or 0), "run_dir": str(raw["server_run_dir"]),
                             "log_offset": int(raw.get("server_log_offset") or 0)}
    if raw.get("launcher") == "slurm" or raw.get("job_id"):
        return cast(SlurmLaunch, {**data, "launcher": "slurm", "job_id": str(raw.get("job_id") or "")})
    if raw.get("launcher") == "shard_runs" or raw.get("shard_runs"):
        return cast(ShardRunsLaunch, {**data, "launcher": "shard_runs", "shards": list(raw.get("shards") or []),
                                      "shard_runs": dict(raw.get("shard_runs") or {})})
    return cast(DetachedLaunch, {**data, "launcher": "detached"})


LAUNCH_KEYS = frozenset().union(*(t.__annotations__ for t in (DetachedLaunch, SlurmLaunch, ShardRunsLaunch)))


def shards_of(record: LaunchRecord | None) -> list[int]:
    """The shards a launch ran (none for a launch of one process)."""
    if record is None or record["launcher"] == "detached":
        return []
    return list(record.get("shards") or [])


class ServerRecord(TypedDict, total=False):
    """One start of the job's server (a two-process job, agent/launchers/server.py)."""

    n: int  # 1-based server load within the session
    run_dir: str
    port: int
    pid: int | None
    started: float
    ready_seconds: float | None  # launch to a healthy endpoint: the load a client-side fix does not repeat
    outcome: str  # "ready" | "exited" | "timeout" | "stopped" (restarted after a server-side fix)
    clients: int  # client runs served by this load
    log_offset: int  # the server log's size when the last client started
    seconds: float  # launch to ready, exit or the ready timeout
    exit_code: int | None  # how a server that never became ready exited
    started_with: list[str]  # its command, env remedies and patched library files (a change to them restarts it)
