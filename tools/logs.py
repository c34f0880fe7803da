"""Turn raw job-log bytes into clean lines that say which process and which logger wrote them.

A vLLM log interleaves several processes. A line may carry a process prefix ``(Worker pid=1234) `` (vLLM
writes it after every ``\\n``, never after ``\\r``), a logger prefix
``ERROR 12-02 10:15:01 [multiproc_executor.py:863] ``, ANSI colours, and tqdm redraws separated by ``\\r``.
Ranks of a distributed job written to one file carry a rank prefix instead: torchrun's ``[rank1]:`` (or
``[default1]:``, its role and local rank) and ``srun --label``'s ``1: ``; each rank is then a process of its own.
``clean_lines`` removes all of that and records what it removed on each ``LogLine``.

``fingerprint`` and ``frame_origin`` (tools/fingerprint.py) name a failure; ``extract_tracebacks`` and
``root_cause`` (tools/tracebacks.py, tools/root_cause.py) find it. All are re-exported here, so callers import
everything log-related from ``tools.logs``.

Logs are untrusted input: nothing here evaluates them. The bytes become text first (tools/log_bytes.py: terminal
escapes and control bytes dropped, undecodable bytes U+FFFD, a line that never ends kept bounded); this module
reads the lines of that text.
"""

from __future__ import annotations

import gc
import re

from tools.fingerprint import (
    DEFAULT_LIBRARY_MARKERS,
    Fingerprint,
    FrameOrigin,
    fingerprint,
    frame_origin,
    normalise_message,
)
from tools.log_bytes import bounded_pending, decoded_lines
from tools.log_types import LogLine
from tools.tracebacks import (
    GENERIC_WRAPPER_SIGNALS,
    SHUTDOWN_NOISE_SIGNALS,
    Frame,
    Traceback,
    WrapperSignal,
    extract_tracebacks,
    message_line,
    root_cause,
)

__all__ = [
    "DEFAULT_LIBRARY_MARKERS",
    "GENERIC_WRAPPER_SIGNALS",
    "SHUTDOWN_NOISE_SIGNALS",
    "Fingerprint",
    "Frame",
    "FrameOrigin",
    "LineCleaner",
    "LogLine",
    "Traceback",
    "WrapperSignal",
    "clean_lines",
    "extract_tracebacks",
    "fingerprint",
    "frame_origin",
    "message_line",
    "normalise_message",
    "root_cause",
]


_PROC_PREFIX = re.compile(r"\((?P<proc>[A-Za-z_][\w\-]*(?: rank=\d+)? pid=\d+)\)")
# torchrun's ``[rank1]:`` / ``[default1]:`` (role + local rank), srun --label's `` 1: `` (padded to the widest label)
_RANK_PREFIX = re.compile(r"\[(?P<role>[A-Za-z_]*)(?P<rank>\d{1,6})\]: ?| {0,3}(?P<task>\d{1,6}): ")
_LEVEL_AND_TIME = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<timestamp>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)"
)
_LEVEL_INITIALS = frozenset("DIWEC")
_PROGRESS_BAR = re.compile(
    r"(?P<desc>.*?):?\s*(?:\d{1,3}%(?:\||\s+Completed\b)|\d+(?:\.\d+)?[kMGTP]?(?:it|B)?\s\[\d+:\d\d)"
)
_NOT_A_STAMP = ("", "")
_NO_TAG: tuple[None, None, None] = (None, None, None)
_SLICE_BYTES = 1 << 20
_MAX_CACHED = 4096


# rich.logging.RichHandler's first line of a record: a time column (or its blank), the level padded to 8
_RICH_RECORD = re.compile(r"(?:\[\d\d:\d\d:\d\d\]|\s{10}) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?=\S)")


def clean_lines(data: bytes) -> list[LogLine]:
    """Every meaningful line of ``data``, prefixes removed and recorded; redraws of one progress bar
    collapse to the last one."""
    cleaner = LineCleaner()
    return cleaner.feed(data) + cleaner.finish()


_RANK_INITIALS = frozenset("[ 0123456789")


def _split_rank(raw: str) -> tuple[str | None, str]:
    """(rank, rest) when ``raw`` starts with a rank prefix (``rank1``, ``default1``, ``task 1``), else (None, raw)."""
    match = _RANK_PREFIX.match(raw)
    if match is None or match.end() == len(raw):
        return None, raw
    name = f"{match['role']}{match['rank']}" if match["rank"] else f"task {match['task']}"
    return name, raw[match.end():]


def _progress_bar(text: str) -> re.Match[str] | None:
    """The match of a tqdm-style progress bar (its ``desc`` group names the bar), else None."""
    if "%" not in text and "it/s" not in text and "s/it" not in text:
        return None
    return _PROGRESS_BAR.match(text, 0, 400)  # a bar names itself early; bound the work on huge lines


class LineCleaner:
    """``clean_lines`` for a log that is still growing: ``feed`` chunks as they arrive, ``finish`` at the end.

    A line is returned once its ``\\n`` has arrived. Redraws collapse within one ``feed``; lines already
    returned are never taken back.
    """

    def __init__(self) -> None:
        self._pending = b""
        self._lineno = 0
        # A log repeats a few prefixes millions of times: each distinct one is parsed once.
        self._procs: dict[str, str | None] = {}
        self._stamps: dict[str, tuple[str, str]] = {}  # "INFO 12-02 10:15:01" -> (level, timestamp)
        self._sources: dict[str, str] = {}  # one string object per source, not one per line
        # Per feed: the output, with None where an older redraw was dropped, and each process's live bar.
        self._out: list[LogLine | None] = []
        self._bars: dict[str | None, tuple[int, str]] = {}
        self._dropped = 0

    def feed(self, data: bytes) -> list[LogLine]:
        buffer = self._pending + data if self._pending else bytes(data)
        cut = buffer.rfind(b"\n") + 1
        self._pending = bounded_pending(buffer[cut:])
        return self._clean(buffer if cut == len(buffer) else buffer[:cut]) if cut else []

    def finish(self) -> list[LogLine]:
        rest, self._pending = self._pending, b""
        return self._clean(rest) if rest else []

    def _clean(self, block: bytes) -> list[LogLine]:
        # Millions of small acyclic objects: the cyclic collector would rescan them again and again.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            # Slice by slice, so the decoded text and its split lines exist for one slice at a time.
            start = 0
            while start < len(block):
                end = block.find(b"\n", start + _SLICE_BYTES) + 1 or len(block)
                self._parse(decoded_lines(block[start:end]))
                start = end
            out, self._out, self._bars = self._out, [], {}
            if self._dropped:
                self._dropped = 0
                return [line for line in out if line is not None]
            return out  # type: ignore[return-value]  # nothing was dropped, so no None is in it
        finally:
            if gc_was_enabled:
                gc.enable()

    def _parse(self, raw_lines: list[str]) -> None:
        out, bars = self._out, self._bars
        if len(self._sources) > _MAX_CACHED:
            self._sources.clear()
        lineno = self._lineno
        for raw in raw_lines:
            lineno += 1
            raw = self._unboxed(raw)
            if "\r" in raw:
                if raw.find("\r") != len(raw) - 1:
                    self._redraws(raw, lineno)
                    continue
                raw = raw[:-1]  # vLLM ends the inner lines of a multi-line record with \r\n
            proc, text = self._split_proc(raw) if raw[:1] == "(" else (None, raw)
            if proc is None and raw[:1] in _RANK_INITIALS:
                proc, text = _split_rank(raw)
                if proc is not None and text[:1] == "(":  # a rank's own vLLM processes: ``0: (Worker pid=9) ``
                    inner, text = self._split_proc(text)
                    proc = f"{proc} {inner}" if inner else proc
            level, source, timestamp, text = self._split_tag(text) if text[:1] in _LEVEL_INITIALS else (*_NO_TAG, text)
            if level is None and (bar := _progress_bar(text)) is not None:
                self._emit_bar(LogLine(proc, None, None, text, lineno), bar["desc"].strip())
                continue
            if bars:
                bars.pop(proc, None)
            out.append(LogLine(proc, level, source, text, lineno, timestamp))
        self._lineno = lineno

    _rich_margin: int | None = None

    def _unboxed(self, raw: str) -> str:
        """rich's logging handler draws a record as a column: ``[12:00:01] ERROR    message    file.py:12``,
        its further lines (a traceback) indented to the message's column and padded to the width. Those lines
        come back at the margin, so a traceback reads as Python printed it; other lines are left as they are."""
        head = _RICH_RECORD.match(raw)
        if head is not None:
            self._rich_margin = head.end()
            return raw
        margin = self._rich_margin
        if margin is None:
            return raw
        if raw[:margin].strip() or not raw.strip():
            if raw.strip():
                self._rich_margin = None
            return raw.rstrip()
        return raw[margin:].rstrip()

    def _redraws(self, raw: str, lineno: int) -> None:
        """A line of \\r-separated redraws; vLLM's process prefix, if any, leads only the first one."""
        proc, raw = self._split_proc(raw) if raw[:1] == "(" else (None, raw)
        bar_text, bar_name, head = "", "", ""  # the latest redraw not emitted yet, and how its redraws start
        for segment in raw.split("\r"):
            if not segment.strip():
                continue
            if head and segment.startswith(head) and ("%" in segment or "it/s" in segment):
                bar_text = segment  # the same bar again: only its last redraw will count
                continue
            if bar_text:
                self._emit_bar(LogLine(proc, None, None, bar_text, lineno), bar_name)
                bar_text = head = ""
            level, source, timestamp, segment = (
                self._split_tag(segment) if segment[:1] in _LEVEL_INITIALS else (*_NO_TAG, segment)
            )
            if level is None and (bar := _progress_bar(segment)) is not None:
                bar_text, bar_name, end = segment, bar["desc"].strip(), bar.end("desc")
                head = segment[: end + 1] if segment[end : end + 1] == ":" else ""
                continue
            self._bars.pop(proc, None)
            self._out.append(LogLine(proc, level, source, segment, lineno, timestamp))
        if bar_text:
            self._emit_bar(LogLine(proc, None, None, bar_text, lineno), bar_name)

    def _emit_bar(self, line: LogLine, bar: str) -> None:
        previous = self._bars.get(line.proc)
        if previous is not None and previous[1] == bar:
            # An older redraw of the same bar with nothing of this process since: only the latest counts.
            self._out[previous[0]] = None
            self._dropped += 1
        self._bars[line.proc] = (len(self._out), bar)
        self._out.append(line)

    def _split_proc(self, raw: str) -> tuple[str | None, str]:
        """(process, rest) when ``raw`` starts with vLLM's ``(Name pid=N) `` prefix, else (None, raw)."""
        end = raw.find(") ", 1, 120) + 1
        if end == 0 and raw.endswith(")"):  # a prefix-only line whose trailing space was stripped
            end = len(raw)
        prefix = raw[:end]
        proc = self._procs[prefix] if prefix in self._procs else self._proc_of(prefix)
        return (proc, raw[end + 1 :]) if proc is not None else (None, raw)

    def _proc_of(self, prefix: str) -> str | None:
        match = _PROC_PREFIX.fullmatch(prefix)
        if len(self._procs) > _MAX_CACHED:
            self._procs.clear()
        self._procs[prefix] = proc = match["proc"] if match else None
        return proc

    def _split_tag(self, text: str) -> tuple[str | None, str | None, str | None, str]:
        """(level, source, timestamp, message) of a line that starts with a vLLM logger prefix such as
        ``ERROR 12-02 10:15:01 [multiproc_executor.py:863] ``, else (None, None, None, text)."""
        bracket = text.find(" [", 18, 40)
        close = text.find("]", bracket + 2, bracket + 200) if bracket > 0 else -1
        if close < 0 or text[close + 1 : close + 2] not in ("", " "):
            return (*_NO_TAG, text)
        head = text[:bracket]
        level, timestamp = self._stamps[head] if head in self._stamps else self._stamp_of(head)
        source = text[bracket + 2 : close]
        if not level or " " in source or ":" not in source or not source[-1:].isdigit():
            return (*_NO_TAG, text)
        return level, self._sources.setdefault(source, source), timestamp, text[close + 2 :]

    def _stamp_of(self, head: str) -> tuple[str, str]:
        match = _LEVEL_AND_TIME.fullmatch(head)
        if len(self._stamps) > _MAX_CACHED:
            self._stamps.clear()
        self._stamps[head] = stamp = (match["level"], match["timestamp"]) if match else _NOT_A_STAMP
        return stamp
