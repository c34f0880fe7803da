"""Reading a session trace back (agent/record/trace.py writes it): the header, the events, and what is wrong with it.

A trace is evidence after the fact, often of a session that died: a cut LAST line (the process was killed
mid-write) is expected and read up to the break; anything else malformed is refused with one line that
names the file and the line, because a postmortem built on a silently skipped event would mislead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.record.trace import FORMAT_VERSION
from tools.errors import TraceError


@dataclass(frozen=True)
class Event:
    index: int  # the event's line number in the file (the header is line 1), for messages
    ts: float
    kind: str
    node: str
    data: dict[str, Any]


@dataclass
class Trace:
    path: Path
    header: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    truncated: bool = False
    problem: str | None = None  # one line on what was cut, for the postmortem to say

    @property
    def session(self) -> str:
        return str(self.header.get("session") or self.path.stem)

    @property
    def duration(self) -> float:
        """Seconds from the header to the last event: the session's real wall clock."""
        last = self.events[-1].ts if self.events else self.header.get("ts", 0.0)
        return max(float(last) - float(self.header.get("ts") or last), 0.0)


def _parse(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"))


def read_trace(path: Path | str) -> Trace:
    """The trace at ``path``; TraceError (exit 2) with one clear line when it cannot be read."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError as exc:
        raise TraceError(f"no trace at {path}") from exc
    except IsADirectoryError as exc:
        raise TraceError(f"{path} is a folder, not a trace file") from exc
    except OSError as exc:
        raise TraceError(f"cannot read the trace {path}: {exc.strerror}") from exc
    lines = blob.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline after the last record
    if not any(line.strip() for line in lines):
        raise TraceError(f"the trace {path} is empty: the session wrote nothing (did it start?)")
    try:
        header = _parse(lines[0])
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path} is not a medic trace: its first line is not JSON") from exc
    if not isinstance(header, dict) or header.get("format") != "medic-trace":
        raise TraceError(f"{path} is not a medic trace: its first line has no \"format\": \"medic-trace\"")
    version = header.get("version")
    if version != FORMAT_VERSION:
        raise TraceError(f"{path} is medic-trace format version {version!r}; this medic reads version "
                         f"{FORMAT_VERSION} (use the medic that wrote it)")
    trace = Trace(path=path, header=header)
    last = len(lines) - 1
    for i, raw in enumerate(lines[1:], start=1):
        lineno = i + 1
        if not raw.strip():
            continue
        try:
            record = _parse(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            if i == last:  # the session died mid-write: keep everything before the break
                trace.truncated = True
                trace.problem = (f"the trace is truncated: line {lineno} (the last) is cut off, so the session "
                                 f"probably died while writing it; {len(trace.events)} event(s) read before it")
                break
            raise TraceError(f"{path} line {lineno} is not JSON (only a cut last line is tolerated)") from exc
        trace.events.append(_event(path, lineno, record))
    return trace


def _event(path: Path, lineno: int, record: Any) -> Event:
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise TraceError(f"{path} line {lineno} is not a trace event (no \"kind\")")
    data = record.get("data")
    try:
        ts = float(record.get("ts") or 0.0)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path} line {lineno} has a timestamp that is not a number") from exc
    return Event(index=lineno, ts=ts, kind=record["kind"], node=str(record.get("node") or ""),
                 data=data if isinstance(data, dict) else {})
