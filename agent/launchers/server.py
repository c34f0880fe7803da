"""The server of a two-process job (``--server``), as a launcher that wraps any other: a ready server first,
then its client, started by the wrapped launcher. Keep one server loaded; restart it only when a fix touched
the server's side.

The prize of this shape is that the long load lives in the server: a fault on the client's side is fixed and
the client rerun against the same loaded server. A server is (re)started when there is none yet, when the one
there has ended, or when the fault just repaired was the server's (its traceback came from the server's log:
the fix is in code or an environment the running server has already read). Each start is ledgered on the host
(``servers/S<n>.json``) before it is waited on, so a resumed session reattaches to a live server instead of
starting a second one. A server that dies while it loads is a launch of kind "server": watched and diagnosed
like a crashed run.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from agent.config import Target
from agent.faults import fault_from_log
from agent.job import in_target_env
from agent.launch_records import ClientOf, DetachedLaunch, LaunchRecord, ServerRecord
from agent.launchers.base import (
    WIDE_CONSOLE,
    Explained,
    Launcher,
    LauncherDeps,
    LaunchPlan,
    RunHandle,
    ipc_variables,
    job_environment,
    read_from,
    write_ledger,
)
from agent.launchers.detached import DetachedHandle
from agent.remedies import arg_edits, env_edits, with_options, with_unset
from agent.repair.types import Fault
from agent.state import SessionState
from tools import runs, server_job
from tools.site_dirs import installed_in


class ServerLauncher:
    """A two-process job: the server (always a detached run on the job's host), then the client by ``inner``."""

    def __init__(self, deps: LauncherDeps, inner: Launcher) -> None:
        self.deps, self.inner = deps, inner

    def start(self, state: SessionState, plan: LaunchPlan, env_base: dict[str, str] | None = None
              ) -> dict[str, Any]:
        server_update, crashed = ensure_server(state, self.deps, plan.n)
        if crashed is not None:  # the server ended before it was ready: watch and diagnose read its log
            self.deps.record("launch", "launch", {"n": crashed["n"], "kind": "server",
                                                  "run_dir": crashed["run_dir"]})
            return {**server_update, "launches": [*(state.get("launches") or []), crashed], "run": crashed}
        command, server_update = for_client(plan.command, server_update, self.deps)
        client = replace(plan, command=command, started=self.deps.clock())  # its time is its own, not its server's
        update = self.inner.start(state, client, {**WIDE_CONSOLE, **(env_base or {})})
        server = server_update["servers"][-1]
        record: LaunchRecord = update["run"].copy()
        record["client_of"] = {"server": server["n"], "run_dir": server["run_dir"],
                               "log_offset": server.get("log_offset", 0)}
        return {**update, **server_update, "launches": [*update["launches"][:-1], record], "run": record}

    def handle(self, record: LaunchRecord) -> RunHandle:
        if record.get("kind") == "server":
            return ServerStartHandle(self.deps, record)
        client_of = record.get("client_of")
        if record["launcher"] != "detached" or client_of is None:
            return self.inner.handle(record)
        return ClientHandle(self.deps, record, client_of)

    def log_of(self, record: LaunchRecord) -> str:
        return self.inner.log_of(record)

    def explain(self, state: SessionState, record: LaunchRecord, fault: Fault) -> Explained:
        return sided(state, self.deps, record, self.inner.explain(state, record, fault).fault)

    def end(self, state: SessionState, spare: Collection[str] = ()) -> None:
        kept = server_runs(state)[-1:] if self.deps.config.target.keep_server else []
        self.inner.end(state, [*spare, *kept])
        runs.stop_all(self.deps.host, [runs.Run.in_dir(f) for f in server_runs(state) if f not in [*spare, *kept]])


class ServerStartHandle(DetachedHandle):
    """A server that ended (or was stopped) before its health endpoint answered: a fault whatever its exit code,
    for its client never ran (an exit 0 leaves no output to check)."""

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str:
        record["exit_code"] = status.exit_code
        return "crashed"


class ClientHandle(DetachedHandle):
    """The client of a two-process job. Its server ending ends it too: a client retrying a dead server waits out
    its own timeouts, and the server's traceback, which diagnose reads, is already written."""

    def __init__(self, deps: LauncherDeps, record: LaunchRecord, client_of: ClientOf) -> None:
        super().__init__(deps, record)
        self.server = runs.Run.in_dir(client_of["run_dir"])

    def status(self) -> runs.RunStatus:
        status = super().status()
        if status.state == "running" and not server_job.alive(self.deps.host, self.server):
            self.deps.record("warning", "watch", {"message": "the server ended under its client: client stopped"})
            self.stop()
            status = super().status()
        return status


def current_server(state: SessionState) -> ServerRecord | None:
    servers = state.get("servers") or []
    return servers[-1] if servers and servers[-1].get("outcome") == "ready" else None


def restart_for(state: SessionState, server: ServerRecord, target: Target) -> str | None:
    """Why the server must start afresh to read a fix, or None: a fault seen on its side was repaired since it
    started, or a change kept since alters what it started with (a wrong output's repair names no side)."""
    fault = state.get("fault") or {}
    if fault.get("side") == "server" and fault.get("server") == server.get("n"):
        return "a server-side fix"
    if server.get("started_with") not in (None, started_with(state, target)):  # None: an older medic's record
        return "a change to its command, its environment or the library's files"
    return None


def started_with(state: SessionState, target: Target) -> list[str]:
    """What a server reads as it starts that a kept change may alter: its command, the env remedies, and the
    library's files the kept patches changed (the client's own code and the fixable packages are the client's)."""
    patches = state.get("patches") or []
    library = sorted(f["path"] for p in patches for f in (p.get("patch") or {}).get("files") or []
                     if any(installed_in(f["path"], package) for package in target.library_packages))
    return [shlex.join(server_command(state, target)), *(e.describe() for e in env_edits(patches)), *library]


def ensure_server(state: SessionState, deps: LauncherDeps, n: int) -> tuple[dict[str, Any], LaunchRecord | None]:
    """(state update, a crashed launch record or None). On None, ``servers[-1]`` in the update is ready."""
    servers: list[ServerRecord] = [dict(s) for s in state.get("servers") or []]  # type: ignore[misc]
    live = current_server(state)
    if live is not None:
        run = runs.Run.in_dir(live["run_dir"])
        if not server_job.alive(deps.host, run):
            live["outcome"] = "exited"
            deps.record("server", "launch", {"event": "gone", "n": live["n"], "run_dir": live["run_dir"]})
        elif why := restart_for(state, live, deps.config.target):
            runs.stop(deps.host, run)
            live["outcome"] = "stopped"
            deps.record("server", "launch", {"event": "stopped", "n": live["n"], "why": why})
        else:
            deps.record("server", "launch", {"event": "reused", "n": live["n"], "port": live["port"],
                                             "clients": live.get("clients", 0)})
            return {"servers": [*servers[:-1], live]}, None
        servers[-1] = live
    record = start(state, deps, len(servers) + 1)
    servers.append(record)
    if record["outcome"] == "ready":
        return {"servers": servers}, None
    crashed: DetachedLaunch = {"n": n, "kind": "server", "launcher": "detached", "run_dir": record["run_dir"],
                               "started": record["started"], "exit_code": record.get("exit_code"), "phases": {},
                               "checks_during_load": []}
    return {"servers": servers}, crashed


def server_command(state: SessionState, target: Target) -> list[str]:
    """The server's command as the next launch runs it: the kept option remedies for the server set on it."""
    return with_options(target.server_command or [], arg_edits(state.get("patches") or [], "server"))


def start(state: SessionState, deps: LauncherDeps, n: int) -> ServerRecord:
    cfg = deps.config
    target = cfg.target
    base = f"{cfg.host_dir}/runs/S{n}"
    ledger = f"{cfg.host_dir}/servers/S{n}.json"
    earlier = None
    if deps.host.exists(ledger):  # started before medic died: reattach to it
        with contextlib.suppress(ValueError, KeyError):
            earlier = json.loads(deps.host.read_bytes(ledger))
    if earlier:
        run, port = runs.Run.in_dir(str(earlier["run"])), int(earlier["port"])
        deps.record("server", "launch", {"event": "reattached", "n": n, "run_dir": run.dir, "port": port})
    else:
        port = target.server_port or server_job.free_port(deps.host, target.python)
        command, resolved = in_target_env(deps.host, server_job.with_port(server_command(state, target), port), target)
        env, unset = job_environment(deps, state, WIDE_CONSOLE)
        deps.host.run(["mkdir", "-p", f"{cfg.host_dir}/servers"], timeout=30)
        run = runs.launch(deps.host, with_unset(command, unset), run_dir=base, cwd=target.workdir, env=env,
                          ipc_vars=ipc_variables(deps))
        write_ledger(deps.host, ledger, {"n": n, "run": run.dir, "port": port})
        deps.record("server", "launch", {"event": "started", "n": n, "run_dir": run.dir, "log": run.log,
                                         "port": port, "command": command, **resolved})
    started = deps.clock()
    ready = server_job.wait_ready(deps.host, target.python, run, port, timeout=target.server_ready_timeout,
                                  poll=max(0.2, deps.poll_interval))
    pid = runs.status(deps.host, run).pid
    if ready.port is not None and ready.port != port:  # it said so in its log: the client goes there
        deps.record("warning", "launch", {"message": f"server S{n} announced port {ready.port} in its log, not "
                                                     f"{port}: medic asked it there and its client goes there"})
        port = ready.port
    outcome = {"ready": "ready", "exited": "exited", "timeout": "timeout"}[ready.state]
    if ready.state == "timeout":
        runs.stop(deps.host, run)
    deps.record("server", "launch", {"event": ready.state, "n": n, "port": port, "pid": pid, "run_dir": run.dir,
                                     "seconds": round(ready.seconds, 1), "exit_code": ready.exit_code})
    return {"n": n, "run_dir": run.dir, "port": port, "pid": pid, "started": started,
            "ready_seconds": round(ready.seconds, 1) if ready.state == "ready" else None, "outcome": outcome,
            "clients": 0, "seconds": round(ready.seconds, 1), "exit_code": ready.exit_code,
            "started_with": started_with(state, target)}


def server_runs(state: SessionState) -> list[str]:
    """Run folders of every server of the session (for ending them with the session)."""
    return [s["run_dir"] for s in state.get("servers") or [] if s.get("run_dir")]


def for_client(command: list[str], update: dict[str, Any], deps: LauncherDeps) -> tuple[list[str], dict[str, Any]]:
    """The client's command against the ready server (``{port}`` filled in), and the server's record with
    this client counted and its log's size now (the client's part of the server log starts there)."""
    servers = list(update["servers"])
    server: ServerRecord = dict(servers[-1])  # type: ignore[assignment]
    stat = deps.host.stat(runs.Run.in_dir(server["run_dir"]).log)
    server["clients"] = server.get("clients", 0) + 1
    server["log_offset"] = stat.size if stat else 0
    servers[-1] = server
    return server_job.with_port(command, server["port"]), {**update, "servers": servers}


# Packages that carry a client's HTTP requests: an exception raised inside them reports what the other side
# did, so the server's own traceback (when it logged one meanwhile) is the cause to repair.
HTTP_CLIENT_PACKAGES = ("openai", "httpx", "httpcore", "aiohttp", "requests", "urllib3", "http")  # http: stdlib


HTTP_CLIENT_FRAME = re.compile(r"/(?:" + "|".join(HTTP_CLIENT_PACKAGES) + r")\d*/")  # httpx2, httpcore2 too


NOT_READY = "ServerNotReady"


def not_ready(server: ServerRecord | None, record: LaunchRecord, last_line: str) -> str:
    """How a server that never became ready ended, with its log's last line (the log's own words)."""
    server = server or {}
    seconds = f"after {server['seconds']} s " if server.get("seconds") is not None else ""
    if server.get("outcome") == "timeout":
        how = f"did not answer {server_job.HEALTH_PATH} {seconds}(stopped: --server's ready timeout)"
    else:
        code = record.get("exit_code", server.get("exit_code"))
        how = f"exited {'(code unknown)' if code is None else code} {seconds}before {server_job.HEALTH_PATH} answered"
    return f"the server {how}; the client never ran (its log ends: {last_line[:200]})"


def raised_in_http_client(fault: Fault) -> bool:
    return any(HTTP_CLIENT_FRAME.search(frame.file) for frame in fault.frames[-3:])


def server_part(deps: LauncherDeps, client_of: ClientOf) -> bytes:
    """What the server logged since this client started: the server's side of the client's failure."""
    return read_from(deps.host, runs.Run.in_dir(client_of["run_dir"]).log, client_of["log_offset"])


def sided(state: SessionState, deps: LauncherDeps, record: LaunchRecord, client_fault: Fault) -> Explained:
    """(the fault to repair, its side, the server load it was seen on). A server that crashed before it was
    ready is the server's fault; a client that failed in its HTTP library (or with no traceback) while the
    server logged a traceback is the server's too; anything else is the client's."""
    if record.get("kind") == "server":
        server = next((s for s in state.get("servers") or [] if s.get("run_dir") == record.get("run_dir")), None)
        if client_fault.exc_type == "NoTraceback":  # nothing to repair in its log: what it did is the fault
            said = not_ready(server, record, client_fault.message)
            client_fault = replace(client_fault, exc_type=NOT_READY, message=said)
        return Explained(client_fault, "server", server["n"] if server else None)
    client_of = record.get("client_of")
    if client_of is None:
        return Explained(client_fault)
    server_fault = fault_from_log(server_part(deps, client_of), stage=client_fault.stage)
    if server_fault.exc_type != "NoTraceback" and (
            client_fault.exc_type == "NoTraceback" or raised_in_http_client(client_fault)):
        return Explained(server_fault, "server", client_of["server"])
    return Explained(client_fault, "client", client_of["server"])
