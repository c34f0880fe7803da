"""The session trace: one JSONL file, a header line, then one event per line, flushed as written.

Every event passes through the Redactor before it reaches the file. Replay (agent/readers/replay.py) serves tool and
LLM results from these events; the postmortem renders them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from agent.events import EventKind
from agent.payloads import check_payload
from tools.errors import UsageError
from tools.redact import Redactor

FORMAT_VERSION = 1
MAX_FIELD = 64_000  # a log excerpt or file view beyond this is cut, and says so


def _bounded(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_FIELD:
        return value[:MAX_FIELD] + f"\n…[{len(value) - MAX_FIELD} characters cut]"
    if isinstance(value, dict):
        return {k: _bounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(v) for v in value]
    return value


class TraceWriter:
    """Append-only; safe to reopen for a resumed session (the header is written once)."""

    def __init__(self, path: Path, header: dict[str, Any], redactor: Redactor, announce_resume: bool = True) -> None:
        self.path = path
        self.redactor = redactor
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not path.exists() or path.stat().st_size == 0
            # unbuffered, append-only: a line is written whole or (after a failed write) cut back off
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot write the trace in {path.parent}: {exc.strerror}") from exc
        self.opened = time.time()  # a launch started before this is one a resumed medic found, not one it made
        self.resumed = not fresh and announce_resume
        if fresh:
            self._write({"format": "medic-trace", "version": FORMAT_VERSION, "ts": time.time(), **header})
        elif announce_resume:  # (not for a note after the session's end, such as --notify's result)
            self.event("resume", "cli", {"pid": os.getpid()})

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(self.redactor.data(_bounded(record)), default=str, ensure_ascii=False)
        data = (line + "\n").encode()
        if self._fd is None:
            raise UsageError(f"the trace {self.path} is closed")
        size = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(28, "No space left on device")
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)  # never leave half a line for replay to choke on
            raise UsageError(f"cannot write the trace {self.path}: {exc.strerror}") from exc

    def event(self, kind: EventKind, node: str, data: dict[str, Any] | None = None) -> None:
        check_payload(kind, data or {})
        self._write({"ts": time.time(), "kind": kind, "node": node, "data": data or {}})

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
