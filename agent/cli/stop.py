"""`medic stop SESSION`: end what a session left running on its host — its server, a run it launched — without
going on with it. A stopped medic (Ctrl-C, SIGTERM, kill) leaves its detached runs up on purpose, so that
`medic resume` reattaches to a loaded server instead of loading it again; `--keep-server` leaves the last server
up when the session ends. This is how a person ends them when neither is wanted.

What is left is read from the session's trace (every server start and launch is recorded before it is waited
on), so a session stopped while its server was still loading is covered too; each run is asked on the host
whether it still runs before it is ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.session_files import load_config, session_lock
from tools import runs
from tools.console import make_console
from tools.errors import MedicError

console = make_console(stderr=True)
SERVER_ENDED = ("stopped", "gone", "exited", "timeout")  # server events after which nothing of it runs


@dataclass(frozen=True)
class LeftRun:
    what: str  # "server S1 (port 40123)", "launch 2"
    run_dir: str


def left_running(trace: Path) -> list[LeftRun]:
    """The server starts and detached launches of the trace that no later event says ended."""
    from agent.readers.tracefile import read_trace

    servers: dict[object, LeftRun] = {}
    launches: dict[object, LeftRun] = {}
    for event in read_trace(trace).events:
        data = event.data
        if event.kind == "server" and data.get("event") in ("started", "reattached") and data.get("run_dir"):
            servers[data.get("n")] = LeftRun(f"server S{data.get('n')} (port {data.get('port')})", str(data["run_dir"]))
        elif event.kind == "server" and data.get("event") in SERVER_ENDED:
            servers.pop(data.get("n"), None)
        elif event.kind == "launch" and data.get("run_dir"):
            launches[data.get("n")] = LeftRun(f"launch {data.get('n')} ({data.get('kind') or 'target'})",
                                              str(data["run_dir"]))
            if data.get("target_beside"):  # the next launch, started beside this canary (agent/launchers/beside.py)
                n = int(data.get("n") or 0) + 1
                launches[n] = LeftRun(f"launch {n} (target, started beside the canary)", str(data["target_beside"]))
        elif event.kind == "run_end":
            launches.pop(data.get("launch"), None)
    return [*servers.values(), *launches.values()]


def left_line(trace: Path, session: str, host: str, last_only: bool = False) -> str:
    """One line for a person: which servers medic left up on the host (``last_only``: the one --keep-server
    keeps when the session ends), and how to end them."""
    try:
        servers = [run.what for run in left_running(trace) if run.what.startswith("server")]
        servers = servers[-1:] if last_only else servers
    except (MedicError, OSError):  # the stop message must not fail on an unreadable trace: nothing to name then
        return ""
    if not servers:
        return ""
    return (f"{', '.join(servers)} left running on {host}: `medic resume {session}` reuses it, "
            f"`medic stop {session}` ends it")


def stop(session: str) -> None:
    """End the runs a session left on its host (its server, a launch), without resuming the session."""
    from agent.session import connect_host  # the session graph: a second of imports
    config = load_config(session)
    trace = Path(config.traces_dir) / f"{session}.jsonl"
    with session_lock(session):  # not while a medic process drives the session
        left = left_running(trace) if trace.exists() else []
        host = connect_host(config)
        try:
            live = [run for run in left if runs.status(host, runs.Run.in_dir(run.run_dir)).state == "running"]
            runs.stop_all(host, [runs.Run.in_dir(run.run_dir) for run in live])
        finally:
            host.close()
    for run in live:
        console.print(f"ended {run.what}: {run.run_dir}", markup=False)
    console.print(f"{len(live)} run(s) of session {session} ended on {config.target.host}"
                  + (f"; `medic resume {session}` starts them afresh" if live else ""), markup=False)
