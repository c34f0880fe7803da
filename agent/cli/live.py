"""What ``medic run`` and ``medic resume`` show while they drive a session, and what they do when it stops.

At a terminal the events scroll above a live panel (agent/record/panel.py); off one (a pipe, a log file, CI) they
are plain lines, one event a line, never wrapped, no control codes. SIGTERM stops medic the way Ctrl-C does:
the session's lock and trace are let go, a ``stopped`` event is recorded, and ``medic resume`` goes on
(the job itself is detached and keeps running). ``--notify CMD`` is told of the end (agent/readers/notify.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from agent.config import SessionConfig
from agent.outcomes import OUTCOMES
from agent.readers.notify import append_event, notify, notify_event
from agent.readers.watch import TraceFollower
from agent.record.panel import LivePanel, at_terminal
from agent.record.people import Shortener
from agent.record.view import View
from agent.session_files import read_failure
from tools.console import make_console


class Stopped(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be: no `except Exception` swallows it."""


def make_view(config: SessionConfig, console: Any = None) -> View:
    """The live panel at a terminal (caught up with the trace so far, for a resumed session), else lines."""
    console = console or make_console(stderr=True, highlight=False)
    if not at_terminal(console):
        return View(console, shortener=Shortener.for_config(config.model_dump()))
    follower = TraceFollower(config)
    follower.catch_up()
    return LivePanel(follower.state, console)


def close_view(view: View) -> None:
    if isinstance(view, LivePanel):
        view.stop()


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    def stop(signum: int, _frame: FrameType | None) -> None:
        raise Stopped(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def drive(config: SessionConfig, run: Callable[[View], tuple[str, dict[str, Any]]]) -> str:
    """Run the session with the view a person can read; the outcome (``stopped`` after a signal)."""
    from agent.session import session_redactor  # the session graph: a second of imports
    view = make_view(config)
    try:
        with sigterm_stops():
            try:
                outcome = run(view)[0]
            except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: the trace says so, `medic resume` goes on
                outcome = "stopped"
                how = str(err) or "SIGINT"
                append_event(config, "stopped", {"signal": how, "pid": os.getpid()}, session_redactor(config))
                view.event("stopped", "cli", {"signal": how})
    finally:
        close_view(view)
    return outcome


def tell(config: SessionConfig, outcome: str) -> None:
    """The session's --notify command, told how it ended or what it waits for; its result on one line."""
    from agent.session import read_checkpoint, session_redactor  # the session graph: a second of imports
    if not config.notify:
        return
    values = read_checkpoint(config.session_id)[0]
    ok, said = notify(config.notify, config, outcome, end_detail(config, outcome, values), session_redactor(config))
    View(shortener=Shortener.for_config(config.model_dump())).event(
        "notify", "cli", {"event": notify_event(outcome), "ok": ok, "detail": said})


def end_detail(config: SessionConfig, outcome: str, values: dict[str, Any]) -> str:
    """One line on how the session ended or what it waits for, for --notify's summary."""
    from agent.session import pending_interrupt  # the session graph: a second of imports
    if outcome in ("waiting", "host_change"):
        waiting = pending_interrupt(config.session_id) or {}
        what = {"approve_patch": "a patch to approve", "confirm_launch": "a go to relaunch",
                "launch_into_fault": "an answer: the only repair for a fault that will crash the job was rejected",
                "host_change": "a host step: " + "; ".join(waiting.get("host_steps") or [])}.get(
            str(waiting.get("kind")), "a person")
        verb = "resume" if outcome == "host_change" else "approve"
        return f"waits for {what}: `medic {verb} {config.session_id}`"
    if outcome == "stopped":
        return OUTCOMES["stopped"].meaning.replace("SESSION", config.session_id)
    if outcome == "internal_error":
        return str((read_failure(config.session_id) or {}).get("detail") or OUTCOMES[outcome].meaning)
    return str(values.get("outcome_detail") or OUTCOMES.get(outcome, OUTCOMES["internal_error"]).meaning)
