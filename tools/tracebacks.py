"""Python tracebacks in a cleaned job log: find them all, and pick the one that explains the failure.

``extract_tracebacks`` reads each process's lines on their own, and each vLLM logger record on its own (a
worker logs every line of its traceback behind the same ``ERROR ... [multiproc_executor.py:863]`` prefix),
so interleaved output never mixes. A message runs to the end of its traceback, over blank lines between
indented paragraphs too; ``message_line`` is how people see it. Chained causes and exception-group members
are kept. ``root_cause`` (tools/root_cause.py, re-exported here) looks past the wrappers that only say "see
above". ``Frame`` and ``Traceback`` live in tools/log_types.py. Import all of it from ``tools.logs``.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence

from tools.log_types import ChainKind, Frame, LogLine, Traceback
from tools.root_cause import GENERIC_WRAPPER_SIGNALS, SHUTDOWN_NOISE_SIGNALS, WrapperSignal, chain_of, root_cause

__all__ = [
    "GENERIC_WRAPPER_SIGNALS",
    "MAX_CODE_CHARS",
    "MAX_FRAMES",
    "MAX_MESSAGE_CHARS",
    "MAX_MESSAGE_LINES",
    "MAX_SUMMARY_CHARS",
    "SHUTDOWN_NOISE_SIGNALS",
    "Frame",
    "Traceback",
    "WrapperSignal",
    "extract_tracebacks",
    "message_line",
    "root_cause",
]

MAX_MESSAGE_CHARS = 4096
MAX_FRAMES = 60  # the innermost ones: that is where the fault is
MAX_MESSAGE_LINES = 200
MAX_CODE_CHARS = 500
MAX_SUMMARY_CHARS = 600  # a message as reports show it: whole, unless it is a wall of text


_HEADER = "Traceback (most recent call last):"
_TRACED = "from user code:"  # torch.compile (Dynamo) lists the code it was tracing under this line
_GROUP_HEADER = "Exception Group Traceback (most recent call last):"
_STARTS = (_HEADER, "  + " + _GROUP_HEADER, "+ " + _GROUP_HEADER)
_CHAIN_MARKERS: dict[str, ChainKind] = {
    "The above exception was the direct cause of the following exception:": "cause",
    "During handling of the above exception, another exception occurred:": "context",
}
_TOP_GROUP = re.compile(r"( *)\+ " + re.escape(_GROUP_HEADER))
_FRAME = re.compile(r'(?:> )?File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
_EXCEPTION_LINE = re.compile(r"(?P<type>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?: (?P<message>.*))?)?")
# Lines that start some other record, so they cannot continue an exception message.
_NOT_A_MESSAGE = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s|\[?\d{4}-\d\d-\d\d[ T]|\[?[IWEF]\d{4} \d\d:\d\d"
    r"|\S+\.py:\d+: \w*Warning:|\[rank\d+\]|\[Gloo\]|Process [\w\-]+:$"
)
# Exception-group drawing, seen with the group's own margin removed.
_FIRST_MEMBER = re.compile(r"\+-\+-+ (?:\d+|\.\.\.) -+")
_NEXT_MEMBER = re.compile(r"  \+-{3,}(?: (?P<number>\d+|\.\.\.) -+)?")

_FIRST_WINDOW = 100  # lines of the log read after a traceback's first line, at first


def message_line(message: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """``message`` as people read it: every line, joined with single spaces; past ``limit`` characters it is
    cut, and '…' marks the cut."""
    flat = " ".join(message.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def extract_tracebacks(lines: Sequence[LogLine]) -> list[Traceback]:
    """Every traceback in ``lines`` (the last exception of each chain), in log order."""
    found: list[Traceback] = []
    parsed_until: dict[tuple[str | None, ...], int] = {}  # stream -> its last line read already
    for start in [i for i, line in enumerate(lines) if line.text.startswith(_STARTS)]:
        head = lines[start]
        stream = (head.proc, head.level, head.source, head.timestamp)
        if parsed_until.get(stream, 0) >= head.lineno:
            continue  # read already, as part of an earlier traceback or window
        # A stream is one process's untagged lines, or the lines of one logger record. Read a window of
        # the log that grows until a traceback ends inside it, rather than the rest of a huge log.
        window = _FIRST_WINDOW
        while True:
            in_window = lines[start : start + window]
            items = [(ln.text, ln.lineno) for ln in in_window if (ln.proc, ln.level, ln.source, ln.timestamp) == stream]
            complete = _Parser(items, head.proc, head.level).tracebacks(start + window >= len(lines))
            if complete:
                break
            window *= 8
        found += [traceback for traceback, _ in complete]
        parsed_until[stream] = complete[-1][1]
    return sorted(found, key=lambda traceback: min(node.first_lineno for node in chain_of(traceback)))


class _Parser:
    """Reads tracebacks from one stream's (text, lineno) pairs; every method returns the next index too."""

    def __init__(self, items: list[tuple[str, int]], proc: str | None, level: str | None) -> None:
        self.items, self.proc, self.level = items, proc, level
        self.cut = False

    def tracebacks(self, to_the_end: bool) -> list[tuple[Traceback, int]]:
        """Each traceback that ends before the last item (or at it, when the items run to the end of the
        log), with the line number where it ends."""
        complete, i = [], 0
        self.cut = False  # a message's blank lines ran to the last item: what follows them is unknown
        while i < len(self.items):
            if not self.items[i][0].startswith(_STARTS):
                i += 1
                continue
            traceback, i = self.chain(i)
            if (i >= len(self.items) or self.cut) and not to_the_end:
                break  # it may go on past the window
            complete.append((traceback, self.items[i - 1][1]))
        return complete

    def text(self, i: int) -> str | None:
        return self.items[i][0] if i < len(self.items) else None

    def chain(self, i: int) -> tuple[Traceback, int]:
        """The chain starting at ``i``: oldest exception first, each next one pointing back at it."""
        traceback, i = self.one(i, None, None)
        while True:
            marker = self.skip_blank(i)
            kind = _CHAIN_MARKERS.get(self.text(marker) or "")
            start = self.skip_blank(marker + 1)
            if kind is None or not _starts_traceback(self.text(start) or ""):
                return traceback, i
            traceback, i = self.one(start, traceback, kind)

    def one(self, i: int, cause: Traceback | None, kind: ChainKind | None) -> tuple[Traceback, int]:
        header, first_lineno = self.items[i]
        if top_group := _TOP_GROUP.match(header):  # "  + Exception Group Traceback": read it without margin
            indent, end = top_group.group(1), i + 1
            while _in_margin(self.text(end), indent):
                end += 1
            view = _Parser(_demargin(self.items[i:end], len(indent)), self.proc, self.level)
            return view.one(0, cause, kind)[0], end
        frames: deque[Frame] = deque(maxlen=MAX_FRAMES)
        j, seen_frames = i, 0
        if header.startswith((_HEADER, _GROUP_HEADER)):  # else a bare exception line: it was never raised
            j, seen_frames = self.frames(i + 1, frames)
        exc_type, message = None, []
        if exception := _EXCEPTION_LINE.fullmatch(self.text(j) or ""):
            exc_type, message, j = exception["type"], [exception["message"] or ""], j + 1
            while len(message) < MAX_MESSAGE_LINES:
                if _continues_message(self.text(j)):
                    message.append(self.items[j][0])
                    j += 1
                elif (after := self.skip_blank(j)) > j and _continues_paragraph(self.text(after)):
                    # an indented paragraph after blank lines (multiprocessing's bootstrapping error): the
                    # same message; unindented text after a blank line is someone else's output
                    message += ["", self.items[after][0]]  # a run of blank lines: one paragraph break
                    j = after + 1
                else:
                    self.cut = self.cut or after >= len(self.items)
                    break
        traced: deque[Frame] = deque(maxlen=MAX_FRAMES)
        if (self.text(after := self.skip_blank(j)) or "").strip() == _TRACED:
            j = self.frames(after + 1, traced)[0]
        members: tuple[Traceback, ...] = ()
        if header.startswith(_GROUP_HEADER) and _FIRST_MEMBER.fullmatch(self.text(j) or ""):
            members, j = self.members(j)
        traceback = Traceback(
            proc=self.proc,
            frames=tuple(frames),
            exc_type=exc_type,
            message="\n".join(message)[:MAX_MESSAGE_CHARS],
            cause=cause,
            context_kind=kind,
            first_lineno=first_lineno,
            last_lineno=self.items[j - 1][1] if j > i else first_lineno,
            exceptions=members,
            level=self.level,
            omitted_frames=seen_frames - len(frames),
            traced=tuple(traced),
        )
        return traceback, j

    def frames(self, j: int, frames: deque[Frame]) -> tuple[int, int]:
        """``File ...`` lines and their code, up to the exception line; also returns how many were seen."""
        seen, file, line, func, code = 0, "", 0, "", ""
        while (text := self.text(j)) is not None:
            stripped = text.strip()
            if _is_frame(stripped) and (match := _FRAME.match(stripped)):
                if seen:
                    frames.append(Frame(file, line, func, code))
                file, line, func, code = match["file"], int(match["line"]), match["func"] or "", ""
                seen += 1
            elif text.startswith("  "):
                # Source lines, caret or tilde markers, "[Previous line repeated N more times]".
                if seen and not code and stripped.strip("^~ ") and not stripped.startswith("[Previous line"):
                    code = stripped[:MAX_CODE_CHARS]
            elif stripped or not _is_frame((self.text(self.skip_blank(j)) or "").lstrip()):
                break  # (a blank line between frames: loguru's "diagnose" style)
            j += 1
        if seen:
            frames.append(Frame(file, line, func, code))
        return j, seen

    def members(self, j: int) -> tuple[tuple[Traceback, ...], int]:
        """The members of an exception group, from its first ``+-+---- 1 ----`` separator on."""
        members: list[Traceback] = []
        while (text := self.text(j)) is not None:
            separator = _NEXT_MEMBER.fullmatch(text)
            if not (separator or _FIRST_MEMBER.fullmatch(text)):
                break
            j += 1
            if separator and separator["number"] is None:
                break  # the closing line
            start = j
            while _in_member(self.text(j)):
                j += 1
            view, i = _Parser(_demargin(self.items[start:j], 2), self.proc, self.level), 0
            while i < len(view.items):
                if _starts_traceback(view.items[i][0]):
                    member, i = view.chain(i)
                    members.append(member)
                else:
                    i += 1
        return tuple(members), j

    def skip_blank(self, i: int) -> int:
        while (text := self.text(i)) is not None and not text.strip():
            i += 1
        return i


def _continues_message(text: str | None) -> bool:
    return bool(
        text
        and text.strip()
        and text not in _CHAIN_MARKERS
        and not text.startswith((*_STARTS, _GROUP_HEADER, "+-+"))
        and not _NOT_A_MESSAGE.match(text)
    )


def _continues_paragraph(text: str | None) -> bool:
    return bool(text and text[:1] in " \t" and _continues_message(text) and not _is_frame(text.lstrip()))


def _is_frame(stripped: str) -> bool:
    return stripped.startswith(("File ", "> File "))


def _in_member(text: str | None) -> bool:
    return text is not None and text.startswith("  ") and not _NEXT_MEMBER.fullmatch(text)


def _starts_traceback(text: str) -> bool:
    return text.startswith((*_STARTS, _GROUP_HEADER)) or _EXCEPTION_LINE.fullmatch(text) is not None


def _in_margin(text: str | None, indent: str) -> bool:
    return text is not None and text.startswith(indent) and text[len(indent) :].lstrip(" ")[:1] in ("|", "+")


def _demargin(items: list[tuple[str, int]], width: int) -> list[tuple[str, int]]:
    """Lines of a group drawn at ``width``: ``| text`` becomes ``text``; the group's drawing is kept."""
    view = []
    for text, lineno in items:
        inner = text[width:] if text.startswith(" " * width) else text.lstrip(" ")
        inner = inner[2:] if inner[:2] in ("| ", "+ ") else "" if inner in ("|", "+") else inner
        view.append((inner, lineno))
    return view
