"""`medic replay` and `medic postmortem`: a recorded session, re-decided or explained. No host, no LLM.

A bad trace makes read_trace raise TraceError (exit 2, one line, printed by agent/cli/main.py) and nothing is
written: the HTML page is rendered in full first, and only then put in place atomically.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from tools.errors import UsageError


def replay(trace: Annotated[Path, typer.Argument(help="a session trace (.jsonl)")]) -> None:
    """Re-run today's decision logic against a recorded session; exit 1 at the first divergence, or when the
    trace stops before the session's end (cut, or no exit event): what came after could not be compared."""
    from agent.readers.replay import replay as run_replay

    result = run_replay(trace)
    if result.first_divergence:
        typer.echo(f"replay: {result.events_compared} decision(s) compared; first divergence: "
                   f"{result.first_divergence}")
        raise typer.Exit(1)
    if result.stopped:
        typer.echo(f"replay: {result.events_compared} decision(s) compared, no divergence up to where "
                   f"{result.stopped}")
        raise typer.Exit(1)
    typer.echo(f"replay: {result.events_compared} decision(s) compared, no divergence "
               f"({result.seconds * 1000:.1f} ms)")


def postmortem(
    trace: Annotated[Path, typer.Argument(help="a session trace (.jsonl)")],
    html: Annotated[Path | None, typer.Option(help="also write a self-contained HTML page here")] = None,
) -> None:
    """The postmortem of a session, as markdown on stdout (and optionally one HTML page)."""
    from agent.readers.postmortem import postmortem_markdown
    from agent.readers.postmortem_html import postmortem_html
    from agent.readers.tracefile import read_trace

    parsed = read_trace(trace)
    text = postmortem_markdown(parsed)
    if html is not None:  # rendered in full before anything is written
        write_atomic(html, postmortem_html(parsed))
    typer.echo(text, nl=False)
    if parsed.truncated:
        typer.echo(f"medic: warning: {parsed.problem}", err=True)


def write_atomic(path: Path, text: str) -> None:
    """A temp file in the same folder, then os.replace: the page is whole or absent, never half-written."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"--html {path}: the folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc

