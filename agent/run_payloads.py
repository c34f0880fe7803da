"""What a launch's events carry (launch, phase, run_end, server, scheduler, resubmit, shard): their payloads in
``PAYLOADS`` (agent/payloads.py)."""

from __future__ import annotations

from typing import Any, TypedDict


class LaunchData(TypedDict, total=False):
    n: int
    kind: str  # "target" | "canary" | "server"
    run_dir: str
    command: list[str]
    reattached: bool
    beside: bool  # a target adopted: started beside the canary, nothing changed since
    target_beside: str  # a canary's: the run folder of the target started beside it
    wrong_output_set_aside: dict[str, str]  # the last target's wrong output, moved before this launch: from, to
    interpreter: dict[str, Any]  # which bare python name ran as the target's python
    script: dict[str, Any]  # which program of the target env ran for the command head (given, ran)
    job_id: str
    job_name: str
    shards: list[int]
    shard_runs: dict[str, Any]
    reattached_shards: list[int]


class PhaseData(TypedDict, total=False):
    phase: str
    percent: float | None
    eta: float | None
    launch: int


class RunEndData(TypedDict, total=False):
    outcome: str
    exit_code: int | None
    seconds: float
    launch: int
    phases: dict[str, float]
    failed_patch: str | None


class ServerData(TypedDict, total=False):
    event: str  # started, ready, failed, reused, reattached, stopped, gone, …
    n: int
    run_dir: str
    log: str
    port: int
    pid: int | None
    command: list[str]
    clients: int
    why: str
    seconds: float
    exit_code: int | None
    interpreter: dict[str, Any]
    script: dict[str, Any]


class SchedulerData(TypedDict, total=False):
    job_id: str
    state: str
    reason: str
    launch: int


class ResubmitData(TypedDict, total=False):
    launch: int | None
    job_id: str | None
    state: str
    count: int
    backoff: float
    shards: list[int]
    given_up: bool


class ShardData(TypedDict, total=False):
    shard: int
    verified: bool
    launch: int | None
    of: int
    detail: str
    before_launch: bool
