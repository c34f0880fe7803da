"""``--notify CMD``: tell someone when a session waits for a person, ends, or is stopped.

medic runs CMD through ``/bin/sh -c`` with MEDIC_SESSION, MEDIC_EVENT (waiting | ended | stopped),
MEDIC_OUTCOME, MEDIC_EXIT_CODE and MEDIC_SUMMARY (one line, redacted like the trace) added to medic's own
environment — never the job's variables, which may hold its secrets. Whatever CMD does (fails, hangs, is
missing) never changes how the session ends: it is recorded in the trace as a ``notify`` event.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Literal

from agent.config import SessionConfig
from agent.events import EventKind
from agent.outcomes import exit_code
from agent.record.people import Shortener, for_people
from agent.record.trace import TraceWriter
from tools.redact import Redactor

NotifyEvent = Literal["waiting", "ended", "stopped"]
NOTIFY_TIMEOUT = 60.0  # seconds: a message sender that hangs does not hold the session's end
MAX_SUMMARY = 300


def notify_event(outcome: str) -> NotifyEvent:
    """Which notification an outcome is: a person is needed, or the session is over."""
    return "waiting" if outcome in ("waiting", "host_change") else "stopped" if outcome == "stopped" else "ended"


def summary_line(config: SessionConfig, outcome: str, detail: str) -> str:
    detail = for_people(detail, Shortener.for_config(config.model_dump()))
    text = " ".join((f"{config.session_id}: {outcome}" + (f" — {detail}" if detail else "")).split())
    return text[:MAX_SUMMARY]


def notify(command: str, config: SessionConfig, outcome: str, detail: str, redactor: Redactor) -> tuple[bool, str]:
    """Run the notify command once for this end of the session; (ok, what happened), never an exception."""
    event = notify_event(outcome)
    env = {**os.environ, "MEDIC_SESSION": config.session_id, "MEDIC_EVENT": event, "MEDIC_OUTCOME": outcome,
           "MEDIC_EXIT_CODE": str(exit_code(outcome)),
           "MEDIC_SUMMARY": redactor.text(summary_line(config, outcome, detail))}
    try:
        done = subprocess.run(["/bin/sh", "-c", command], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=NOTIFY_TIMEOUT, start_new_session=True)
    except subprocess.TimeoutExpired:
        ok, said = False, f"no answer after {NOTIFY_TIMEOUT:.0f}s: stopped waiting for it"
    except OSError as err:
        ok, said = False, f"could not run it: {err.strerror}"
    else:
        last = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        ok, said = done.returncode == 0, f"exit {done.returncode}" + (f": {last[-1][:200]}" if last else "")
    append_event(config, "notify", {"event": event, "outcome": outcome, "ok": ok, "detail": said}, redactor)
    return ok, said


def append_event(config: SessionConfig, kind: EventKind, data: dict[str, object], redactor: Redactor) -> None:
    """One event appended to the session's trace once the session's own writer is closed (its end, a stop)."""
    trace = TraceWriter(Path(config.traces_dir) / f"{config.session_id}.jsonl", {"session": config.session_id},
                        redactor, announce_resume=False)
    try:
        trace.event(kind, "cli", data)
    finally:
        trace.close()
