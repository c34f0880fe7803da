"""`medic watch SESSION` and `medic status SESSION [--json]`: a session another process runs, from outside.

Both read only what the running medic writes (trace, checkpoint, lock), so any terminal of the machine that
holds medic's home can look; neither can disturb the session. ``watch`` shows what ``medic run`` shows (the
panel at a terminal, plain lines elsewhere) and ends when the session ends, waits for a person or is stopped,
with the exit code ``medic run`` gave (or would have given).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer

from agent.readers.watch import TraceFollower, session_status
from agent.record.panel import LivePanel, at_terminal
from agent.record.people import for_people
from agent.record.view import View
from agent.session_files import load_config
from tools.console import make_console

POLL = 0.5  # seconds between two reads of the trace
STOPPED_CONFIRM = 2.0  # "not running, no outcome" must last this long: `medic run` may be taking its lock


def status(session: str, as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False) -> None:
    """Where a session stands: running, waiting for a person, ended or stopped, and its panel."""
    config = load_config(session)
    found = session_status(session)
    follower = TraceFollower(config)
    follower.catch_up()
    lines, sh = follower.state.lines(time.time()), follower.state.shortener
    if as_json:
        sys.stdout.write(json.dumps({**found.as_dict(), "panel": lines}) + "\n")
        return
    console = make_console(highlight=False)
    console.print(f"{session}: {found.state}" + (f" ({found.outcome}, exit {found.exit_code})" if found.outcome
                                                 else "") + f" — {for_people(found.detail, sh)}", markup=False)
    for line in lines:
        console.print(f"  {line}", markup=False)


def watch(session: str) -> None:
    """Follow a session another medic process runs, until it ends or waits for a person."""
    config = load_config(session)
    follower = TraceFollower(config)
    console = make_console(stderr=True, highlight=False)
    view = LivePanel(follower.state, console) if at_terminal(console) else View(console,
                                                                                 shortener=follower.state.shortener)
    not_running_since: float | None = None
    try:
        while True:
            for kind, node, data, ts in follower.events():
                view.event(kind, node, data, ts)
            found = session_status(session)
            if found.state == "running":
                not_running_since = None
            elif found.state != "stopped" or (not_running_since is not None and
                                               time.monotonic() - not_running_since >= STOPPED_CONFIRM):
                break
            elif not_running_since is None:
                not_running_since = time.monotonic()
            time.sleep(POLL)
        for kind, node, data, ts in follower.events():  # what was written between the last read and the end
            view.event(kind, node, data, ts)
    except KeyboardInterrupt:  # the watcher stops, not the session: 128+SIGINT, as a shell would say
        raise typer.Exit(130) from None
    finally:
        if isinstance(view, LivePanel):
            view.stop()
    view.console.print(f"{session}: {found.state} — {for_people(found.detail, follower.state.shortener)}",
                       markup=False)
    raise typer.Exit(found.exit_code if found.exit_code is not None else 1)
