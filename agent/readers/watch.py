"""Where a session stands, read from outside the process that runs it: its trace, its checkpoint, its lock.

``medic status`` and ``medic watch`` use this from any terminal of the machine that holds medic's home. A
session is running while a process holds its lock (read from /proc/locks, never by taking the lock: that
could make a starting ``medic resume`` fail); otherwise it ended (an outcome), waits for a person (an
interrupt in the checkpoint), failed (medic's own failure ended its last run: failed.json says where), or was
stopped (none of these: ``medic resume`` goes on). The exit code is the one ``medic run`` gives for the same end
(agent/outcomes.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config import SessionConfig
from agent.outcomes import OUTCOMES, exit_code
from agent.record.panel import PanelState, earlier_loads
from agent.session_files import load_config, read_failure, session_dir


def trace_path(config: SessionConfig) -> Path:
    return Path(config.traces_dir) / f"{config.session_id}.jsonl"


def lock_holder(session_id: str) -> int | None:
    """The pid of the medic process that holds the session's lock, or None when none does."""
    lock = session_dir(session_id) / "lock"
    try:
        info = lock.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    for row in table.splitlines():
        fields = row.split()
        if "FLOCK" not in fields or len(fields) < 6:
            continue
        pid, where = fields[fields.index("FLOCK") + 3], fields[fields.index("FLOCK") + 4]
        parts = where.split(":")
        if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) == info.st_ino and \
                (int(parts[0], 16), int(parts[1], 16)) == (os.major(info.st_dev), os.minor(info.st_dev)):
            return int(pid) if pid.isdigit() else 0
    return None


REVERTED = "reverted.json"  # `medic revert` took the session's patches off: which, and when


def note_reverted(session_id: str, patch_ids: list[str]) -> None:
    """What `medic revert` did, for `medic status`: the outcome stays as the session ended, its files do not."""
    if not patch_ids and (session_dir(session_id) / REVERTED).exists():
        return  # a second revert found nothing left: the first one's note stands
    (session_dir(session_id) / REVERTED).write_text(json.dumps({"at": time.time(), "patches": patch_ids}))


def reverted_since(session_id: str, trace: str) -> str:
    """'patches reverted …; ' when `medic revert` ran after the session's last run wrote its trace, else ''."""
    try:
        done = json.loads((session_dir(session_id) / REVERTED).read_text())
        last_run = Path(trace).stat().st_mtime if Path(trace).exists() else 0.0
    except (OSError, ValueError):
        return ""
    if not isinstance(done, dict) or float(done.get("at") or 0) < last_run:
        return ""  # a later run of the session (a resume) patched again: its own outcome speaks
    ids = [str(p) for p in done.get("patches") or []]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(done["at"])))
    gone = f"its {len(ids)} patch(es) ({', '.join(ids)}) are gone" if ids else "no patch of it was left to take off"
    return f"REVERTED at {when} by `medic revert`: {gone}, the files are as before the session. Before that: "


@dataclass
class Status:
    session: str
    state: str  # running | ended | waiting | failed | stopped
    outcome: str | None  # the outcome name medic run would end with (None while running)
    exit_code: int | None
    detail: str
    pid: int | None
    trace: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def session_status(session_id: str) -> Status:
    from agent.session import read_checkpoint  # the session graph: a second of imports
    config = load_config(session_id)
    pid = lock_holder(session_id)
    values, interrupt = read_checkpoint(session_id)
    trace = str(trace_path(config))
    if pid is not None:
        return Status(session_id, "running", None, None, f"medic (pid {pid}) is running it", pid, trace)
    failed = read_failure(session_id)
    if failed is not None:  # the last run ended in medic's own failure (before any outcome or interrupt)
        return Status(session_id, "failed", "internal_error", exit_code("internal_error"),
                      f"{failed.get('detail') or OUTCOMES['internal_error'].meaning}; `medic resume {session_id}` "
                      "tries that step again", None, trace)
    if interrupt is not None:
        outcome = "host_change" if interrupt.get("kind") == "host_change" else "waiting"
        return Status(session_id, "waiting", outcome, exit_code(outcome), OUTCOMES[outcome].meaning.replace(
            "SESSION", session_id), None, trace)
    if values.get("outcome"):
        outcome = str(values["outcome"])
        detail = str(values.get("outcome_detail") or "")
        return Status(session_id, "ended", outcome, exit_code(outcome), reverted_since(session_id, trace) + detail,
                      None, trace)
    return Status(session_id, "stopped", "stopped", exit_code("stopped"),
                  OUTCOMES["stopped"].meaning.replace("SESSION", session_id), None, trace)


class TraceFollower:
    """The session's trace read by offset, whole lines only; the panel state it builds."""

    def __init__(self, config: SessionConfig) -> None:
        self.path = trace_path(config)
        self.offset = 0
        self.partial = b""
        self.header: dict[str, Any] | None = None
        config_dict = json.loads(config.model_dump_json())
        self.state = PanelState.for_config(config_dict, started=time.time(), history=earlier_loads(
            self.path.parent, config_dict, config.session_id))

    def catch_up(self) -> None:
        """The panel state as of now, from every event written so far (a resumed session's panel)."""
        for kind, _node, data, ts in self.events():
            self.state.apply(kind, data, ts)

    def events(self) -> list[tuple[str, str, dict[str, Any], float]]:
        """New (kind, node, data, ts) since the last call (whoever shows them applies them to the state)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        blob = self.partial + data
        *complete, self.partial = blob.split(b"\n")
        out = []
        for raw in complete:
            try:
                record = json.loads(raw)
            except ValueError:
                continue  # a line cut by a killed writer: the reader of record (tracefile) says so
            if self.header is None and record.get("format") == "medic-trace":
                self.header = record
                self.state.started = float(record.get("ts") or self.state.started)
                continue
            kind, data_ = str(record.get("kind") or ""), record.get("data") or {}
            ts = float(record.get("ts") or time.time())
            out.append((kind, str(record.get("node") or ""), data_, ts))
        return out
