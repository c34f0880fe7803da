"""What a way of running a job is to the graph: a Launcher starts a launch, gives a RunHandle to follow it, names
the log diagnose reads, explains how it ended, and ends everything it started.

A launcher gets the host, the config and a record callback (LauncherDeps), never the graph's nodes; what it
returns is the state update of a launch. One module per way of running: detached.py, shard_runs.py, slurm.py,
and server.py, which wraps any of them (the server first, then its client).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from agent.config import SessionConfig
from agent.events import EventKind
from agent.launch_records import LaunchBase, LaunchRecord
from agent.remedies import activated, env_edits, job_env
from agent.repair.types import Fault
from agent.state import SessionState
from tools import ipc_dir, runs
from tools.errors import HostError, RunError
from tools.host import Host

MAX_DIAGNOSE_BYTES = 64 * 1024 * 1024
Record = Callable[[EventKind, str, "dict[str, Any] | None"], None]
# the shards a fresh launch runs, and the state update that planning them made (shards verified on the way)
ShardPlanner = Callable[[], tuple[list[int], dict[str, Any]]]


@dataclass(frozen=True)
class LauncherDeps:
    """All a launcher is given: where it runs, the session's config, and how to say what happened."""

    host: Host
    config: SessionConfig
    record: Record
    clock: Callable[[], float] = time.time
    poll_interval: float = 0.5


@dataclass(frozen=True)
class LaunchPlan:
    """One launch as the launch node decided it: which (n, kind), what to run, and where it is ledgered."""

    n: int
    kind: str  # "target" | "canary"
    command: list[str]
    started: float
    trace_extra: dict[str, Any] = field(default_factory=dict)  # e.g. which bare python name was substituted
    env: dict[str, str] = field(default_factory=dict)  # set over the job's env (the canary's model variable)
    plan_shards: ShardPlanner = lambda: ([], {})

    def base(self, config: SessionConfig) -> str:
        return f"{config.host_dir}/runs/L{self.n}"

    def ledger(self, config: SessionConfig) -> str:
        return f"{config.host_dir}/launches/L{self.n}.json"

    def fields(self) -> LaunchBase:
        """What every launch's record starts with; the launcher adds its own (agent/launch_records.py LaunchRecord)."""
        return {"n": self.n, "kind": self.kind, "started": self.started, "exit_code": None, "phases": {},
                "checks_during_load": []}


class Explained(NamedTuple):
    """The fault to repair, and for a two-process job the side whose fix it needs and its server load."""

    fault: Fault
    side: str | None = None
    server: int | None = None


class RunHandle(Protocol):
    """watch's view of one launch, however it runs."""

    def follow(self, offset: int) -> runs.LogChunk: ...

    def ended_hint(self) -> bool: ...  # cheap: has it (or its lead shard) written its exit code?

    def status(self) -> runs.RunStatus: ...

    def stop(self) -> None: ...

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str: ...


class Launcher(Protocol):
    """How the graph runs a job: start a launch (its state update), follow it, read it, explain it, end all.
    ``env_base`` is what a wrapping launcher adds under the job's own env (the server's wide console)."""

    def start(self, state: SessionState, plan: LaunchPlan, env_base: dict[str, str] | None = None
              ) -> dict[str, Any]: ...

    def handle(self, record: LaunchRecord) -> RunHandle: ...

    def log_of(self, record: LaunchRecord) -> str: ...

    def explain(self, state: SessionState, record: LaunchRecord, fault: Fault) -> Explained: ...

    def end(self, state: SessionState, spare: Collection[str] = ()) -> None: ...


# rich and other console loggers draw to $COLUMNS when not on a terminal (80 by default), wrapping every
# traceback line into pieces no parser can join: medic's runs of a two-process job get a wide console, and so
# does a wrapper medic read a client in (its client logs into the same log)
WIDE_CONSOLE = {"COLUMNS": "400"}


def job_environment(deps: LauncherDeps, state: SessionState, base: dict[str, str] | None = None,
                    over: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """(env, names to unset) of a launch: the job's env (``over`` set over it) with the kept env remedies applied,
    the target env activated (its bin folder first on PATH): ``python`` in the user's own script is the env's."""
    if ((state.get("preflight") or {}).get("wrapped") or {}).get("client"):
        base = {**WIDE_CONSOLE, **(base or {})}
    env, unset = job_env(deps.host, {**(base or {}), **deps.config.target.env, **(over or {})},
                         env_edits(state.get("patches") or []))
    if "PATH" not in unset:
        env.update(activated(deps.host, deps.config.target.python, env))
    return env, unset


def ipc_variables(deps: LauncherDeps) -> list[str]:
    """The library variables that place its IPC sockets (tools/ipc_dir.py), read once per host and env: each run
    points them at a folder of its own, so a stopped engine leaves no socket in the temp dir."""
    key = (deps.host.name, deps.config.target.python, tuple(deps.config.target.library_packages))
    if key not in _IPC_VARIABLES:
        _IPC_VARIABLES[key] = ipc_dir.library_tempdir_variables(deps.host, deps.config.target.python,
                                                                deps.config.target.library_packages)
    return _IPC_VARIABLES[key]


_IPC_VARIABLES: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}


def launched_before(host: Host, base: str, ledger: str) -> str | None:
    """The run folder of launch ``base`` if it was started already (ledger, or a run folder with a pid)."""
    return ledgered_run(ledger_line(host, ledger)) or run_with_pid(host, base)


def ledgered_run(line: dict[str, Any]) -> str | None:
    """The run folder a ledger line names (None in a line written before its launch: beside.py)."""
    return str(line["run"]) if line.get("run") else None


def run_with_pid(host: Host, base: str) -> str | None:
    """A run folder under ``base`` with a pid file: a launch started whose ledger line was never written."""
    found = host.run(f"ls -1d {shlex.quote(base)}/*/pid 2>/dev/null | head -1", timeout=30)
    path = found.stdout.strip()
    return path.rsplit("/", 1)[0] if path else None


def ledger_line(host: Host, ledger: str) -> dict[str, Any]:
    """What a launch's ledger says ({} where it says nothing readable)."""
    try:
        line = json.loads(host.read_bytes(ledger)) if host.exists(ledger) else {}
    except ValueError:
        return {}
    return line if isinstance(line, dict) else {}


def write_ledger(host: Host, ledger: str, line: dict[str, Any]) -> None:
    host.write_bytes_atomic(ledger, json.dumps({**line, "at": time.time()}).encode())


def run_folders(launch: LaunchRecord) -> list[str]:
    """The run folders of a launch: each shard's, else its one run's."""
    if launch["launcher"] == "shard_runs":
        return list(launch["shard_runs"].values())
    return [launch["run_dir"]] if launch.get("run_dir") else []


def read_log(host: Host, path: str) -> bytes:
    """A run's log for diagnosis: all of it up to MAX_DIAGNOSE_BYTES, else its last MAX_DIAGNOSE_BYTES
    (tracebacks are at the end; a multi-GB log of progress bars must not be read whole)."""
    stat = host.stat(path)
    offset = max(0, (stat.size if stat else 0) - MAX_DIAGNOSE_BYTES)
    return read_from(host, path, offset)


def read_from(host: Host, path: str, offset: int) -> bytes:
    """The log at ``path`` from ``offset`` to its end, chunk by chunk; what could not be read is left out."""
    folder = path.rsplit("/", 1)[0]
    run = replace(runs.Run.in_dir(folder), log=path)
    parts: list[bytes] = []
    while True:
        try:
            chunk = runs.follow(host, run, offset)
        except (RunError, HostError):
            break
        if not chunk.data:
            break
        parts.append(chunk.data)
        offset = chunk.offset
    return b"".join(parts)
