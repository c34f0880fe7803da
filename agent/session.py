"""Running a session: the one loop that drives the graph, holds the lock, and turns the end into an exit code.

Sessions live under $MEDIC_HOME (default ~/.medic): ``checkpoints.sqlite`` (LangGraph's SQLite checkpointer,
one thread per session, durability "sync"; agent/store.py opens it) and ``sessions/<id>/`` (config, lock, report,
and ``failed.json`` while the last run of the session ended in medic's own failure).

Whatever fails inside a session — a node, a tool it calls, the checkpoint database — is caught in one place
(run_session): the session ends with the outcome ``internal_error`` (its own exit code), the trace's last event is
an ``exit`` event that says where and why (with the traceback), and ``medic resume`` tries that step again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import stat
import time
import traceback
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agent import store
from agent.config import SessionConfig
from agent.deps import Deps
from agent.graph import build_graph
from agent.job import missing_script
from agent.launch_records import launch_record
from agent.record.people import Shortener
from agent.record.trace import TraceWriter
from agent.record.view import View
from agent.repair.engine import RepairEngine
from agent.session_files import FAILED, session_dir, session_lock
from tools.errors import MedicError, SessionError, UsageError
from tools.host import Host, LocalHost
from tools.redact import Redactor
from tools.server_input import check_model_folders

RECURSION_LIMIT = 400


def checkpointer() -> contextlib.AbstractContextManager[SqliteSaver]:
    """The checkpoint database for a process that writes sessions (agent/store.py)."""
    return store.writer()


def connect_host(config: SessionConfig) -> Host:
    target = config.target.host
    if target == "local":
        return LocalHost()
    from tools.ssh import SSHHost

    # MEDIC_SSH_CONFIG: another ssh config than ~/.ssh/config (the tests' sshd on loopback uses one)
    return SSHHost(target, config_path=os.environ.get("MEDIC_SSH_CONFIG"), trust_new_host=config.target.trust_new_host)


def check_target(host: Host, config: SessionConfig) -> None:
    """What a session would refuse later, refused before any of it exists: bad input leaves nothing behind."""
    target = config.target
    py = host.stat(target.python)
    if py is None or stat.S_ISLNK(py.mode):  # a dangling symlink names nothing
        raise UsageError(f"target python {target.python} does not exist on {host.name}: pass --python")
    if py.is_dir or not py.mode & 0o111:
        raise UsageError(f"target python {target.python} on {host.name} is not an executable file: pass --python")
    work = host.stat(target.workdir)
    if work is None or not work.is_dir:
        raise UsageError(f"workdir {target.workdir} does not exist on {host.name} (or is not a folder): "
                         "pass --workdir")
    missing = missing_script(host, target)
    if missing:  # a run would launch only to fail with "can't open file"
        raise UsageError(f"{missing}: check -- COMMAND and --validate")
    if target.server_command:  # a model path that is not there would fail as a download, after the server started
        check_model_folders(host, target.server_command, target.command, target.workdir)
    for extra in target.extra_patch_roots:  # preflight says the same for a resumed session
        if not host.exists(extra):
            raise UsageError(f"--patch-root {extra} does not exist on {host.name}")
    traces = Path(config.traces_dir).resolve()
    existing = next(p for p in (traces, *traces.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write the trace in {traces}: {existing} is not a writable folder")


def connect_checked(config: SessionConfig) -> Host:
    """The session's host, connected, with its python and workdir checked (an unknown host fails here too)."""
    host = connect_host(config)
    try:
        check_target(host, config)
    except BaseException:
        host.close()
        raise
    return host


def session_redactor(config: SessionConfig) -> Redactor:
    """Secret-named variables of medic's environment and of the job's own; the job's paths are never secrets."""
    t = config.target
    keep = [t.python, t.workdir, t.model_dir or "", str(Path(config.traces_dir).resolve()), os.getcwd()]
    return Redactor.from_environment({**os.environ, **t.env}, keep=keep)


def make_deps(config: SessionConfig, host: Host | None = None, view: View | None = None,
              engine: RepairEngine | None = None) -> Deps:
    redactor = session_redactor(config)
    host = host or connect_host(config)
    header = {"session": config.session_id, "config": json.loads(config.model_dump_json()), "host": host.name}
    trace = TraceWriter(Path(config.traces_dir) / f"{config.session_id}.jsonl", header, redactor)
    deps = Deps(host=host, config=config, engine=engine or RepairEngine(), trace=trace, view=view or View())
    deps.view.shortener = Shortener.for_config(header["config"])  # what a person reads: short paths
    if engine is None and config.llm is not None:
        from agent.llm.fallback import llm_fallback

        deps.engine.fallback = llm_fallback(config.llm, deps.record)
    return deps


def run_session(config: SessionConfig, *, resume: Any = None, deps: Deps | None = None,
                host: Host | None = None, view: View | None = None) -> tuple[str, dict[str, Any]]:
    """Drive the graph until it ends or waits for a person. Returns (outcome, final state values).

    The one catch: any exception of medic's own once the session runs ends it as ``internal_error`` (recorded,
    never raised); only a request the session cannot take (a resume of a session that waits for nothing, a
    session another process holds) is raised, before anything is written."""
    with session_lock(config.session_id):
        deps = deps or make_deps(config, host=host, view=view)
        step: dict[str, Any] = {"node": "start", "values": {}}  # where it was, for the exit event
        try:
            return _drive(config, deps, resume, step)
        except Exception as err:  # the one place a failure of medic becomes an outcome
            if isinstance(err, SessionError) and step["node"] == "start":
                raise  # the request, not medic: nothing ran, nothing is recorded
            return internal_error(config, deps, err, str(step["node"])), dict(step["values"])
        finally:
            deps.trace.close()


def _drive(config: SessionConfig, deps: Deps, resume: Any, step: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    with checkpointer() as saver:
        graph = build_graph(deps, checkpointer=saver)
        thread = {"configurable": {"thread_id": config.session_id}, "recursion_limit": RECURSION_LIMIT}
        snapshot = graph.get_state(thread)
        if resume is not None:
            if not snapshot.next:
                raise SessionError(f"session {config.session_id} is not waiting for anything")
            stream_input: Any = Command(resume=resume)
        elif snapshot.next or snapshot.tasks or (snapshot.values and not snapshot.values.get("outcome")):
            # an interrupted, killed or failed run: go on from the last checkpoint (a node whose writes were saved
            # but whose next step was not leaves `next` empty and its task still listed)
            stream_input = None
        elif snapshot.values:
            return str(snapshot.values.get("outcome") or "internal_error"), dict(snapshot.values)
        else:
            stream_input = {"session_id": config.session_id}
        upgrade_records(graph, thread, snapshot)
        (session_dir(config.session_id) / FAILED).unlink(missing_ok=True)  # this run is the one status tells of
        step["node"] = ", ".join(snapshot.next) or "preflight"
        try:
            for _ in graph.stream(stream_input, thread, durability="sync"):
                pass
        except Exception:
            try:  # the step that failed: its writes were not saved, so it is the next one still
                after = graph.get_state(thread)
                step["node"], step["values"] = ", ".join(after.next) or step["node"], dict(after.values)
            except Exception:  # the database itself may be what failed: the exit event says so
                pass
            raise
        snapshot = graph.get_state(thread)
        if snapshot.next:
            return ("host_change" if waiting_for(snapshot) == "host_change" else "waiting"), dict(snapshot.values)
        return str(snapshot.values.get("outcome") or "internal_error"), dict(snapshot.values)


def upgrade_records(graph: Any, thread: dict[str, Any], snapshot: Any) -> None:
    """A session checkpointed by a medic whose launch records did not yet name their launcher (a person may answer
    an approval days later, after an upgrade): its records get one (agent/launch_records.py launch_record). The
    update is written as the node that wrote last, so the step the session waits at stays the next one."""
    values = snapshot.values or {}
    records = [*(values.get("launches") or []), *([values["run"]] if values.get("run") else [])]
    if all("launcher" in record for record in records):
        return
    # the checkpoint before this step's lists the node(s) that wrote it (medic makes no other update_state)
    history = list(itertools.islice(graph.get_state_history(thread), 2))
    looped = len(history) > 1 and (snapshot.metadata or {}).get("source") == "loop"
    wrote: tuple[str, ...] = history[1].next if looped else ()
    update: dict[str, Any] = {"launches": [launch_record(r) for r in values.get("launches") or []]}
    if values.get("run"):
        update["run"] = launch_record(values["run"])
    graph.update_state(thread, update, as_node=wrote[0] if len(wrote) == 1 else None)


def internal_error(config: SessionConfig, deps: Deps, err: BaseException, node: str) -> str:
    """Record a failure of medic itself as the session's end: an exit event, failed.json. Never raises."""
    what = f"{type(err).__name__}: {' '.join(str(err).split())}" if str(err) else type(err).__name__
    if not isinstance(err, MedicError):  # a bug: where it happened, for whoever reads the one line
        frame = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
        what += "".join(f" (at {Path(f.filename).name}:{f.lineno})" for f in frame)
    detail = f"failed in {node}: {what[:600]}"
    data = {"outcome": "internal_error", "detail": detail, "node": node, "error": type(err).__name__,
            "traceback": "".join(traceback.format_exception(err))[-8000:]}
    with contextlib.suppress(Exception):  # the trace (a full disk) may be what failed: failed.json still says it
        deps.record("exit", "session", data)
    with contextlib.suppress(OSError):
        folder = session_dir(config.session_id)
        tmp = folder / (FAILED + ".tmp")
        tmp.write_text(json.dumps({"ts": time.time(), "pid": os.getpid(),
                                   **{k: deps.trace.redactor.text(str(v)) for k, v in data.items()}}))
        tmp.replace(folder / FAILED)
    return "internal_error"


def waiting_for(snapshot: Any) -> str | None:
    """The kind of the interrupt a session waits on (approve_patch, host_change, confirm_launch), if any."""
    for task in snapshot.tasks or ():
        for pending in task.interrupts or ():
            if isinstance(pending.value, dict):
                return str(pending.value.get("kind"))
    return None


def read_checkpoint(session_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(state values, what the pending interrupt carries — kind, proposal, host steps — or None) from the
    session's latest checkpoint, without building the graph; read-only (agent/store.py)."""
    tup = store.read(lambda saver: saver.get_tuple({"configurable": {"thread_id": session_id}}), None)
    if tup is None:
        return {}, None
    values = dict(tup.checkpoint.get("channel_values") or {})
    for _task, channel, value in tup.pending_writes or []:
        if channel != "__interrupt__":
            continue
        for item in value if isinstance(value, list) else [value]:
            data = getattr(item, "value", item)
            if isinstance(data, dict):
                return values, dict(data)
    return values, None


def pending_interrupt(session_id: str) -> dict[str, Any] | None:
    return read_checkpoint(session_id)[1]
