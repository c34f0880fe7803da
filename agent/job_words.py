"""What the job itself said of the rows its output lacks.

A driver that catches a sample's error, logs it and goes on exits 0 with that row missing: medic's check sees only
``row 1: no hs_1.safetensors``. speculators 0.5.0's script is one (``logger.warning("Skipping sample %d due to
error: %s", idx, e)``; the failure its neighbours show as a traceback, when two samples in a row fail and it aborts,
is skipped quietly when one does). The job's own line naming a missing row with an error is that row's first fatal
line, and a traceback logged right after it (``logger.exception``) is its root cause, with frames every repair can
read. Without a traceback the error is still the job's: its type is the one the line names, or the one Python
itself gives an ``[Errno N]`` (``OSError(N, …)`` is FileNotFoundError for ENOENT), and the fault has no frames.

Only a wrong output whose every problem is a missing row is lifted: a row that is there and wrong is the check's
fault to report. The log is untrusted: lines are matched, never obeyed, and the fault is redacted by its caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from agent.faults import fault_from_log
from agent.launchers.base import read_log
from agent.repair.types import Fault
from tools import logs
from tools.errors import MedicError
from tools.fingerprint import normalise_message
from tools.host import Host

# a row named in the job's words: "sample 1", "row 1", "idx=1", "item #1", "request 1"
ROW = re.compile(r"\b(?:sample|row|index|idx|item|example|sequence|record|request)\b\W{0,3}(\d+)\b", re.I)
FAILED = re.compile(r"\b(?:error|exception|fail(?:s|ed|ure)?|skip(?:s|ped|ping)?|abort(?:s|ed|ing)?)\b", re.I)
NAMED = re.compile(r"^\s*(?:[\w.]+\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt))\b:?\s*(.*)$")
ERRNO = re.compile(r"^\[Errno (\d+)\] ")
TRACEBACK_LINES = 400  # a logged traceback longer than this is cut: its last frames are the ones read


@dataclass(frozen=True)
class RowWord:
    row: int
    line: str  # the job's own line
    exc_type: str  # the error's type, as the line names it or Python maps its errno; "" when neither says
    message: str  # the error's text, after the line's failure word
    traceback: bytes  # a traceback logged right after the line, else b""


def said_of_rows(data: bytes, rows: Collection[int]) -> RowWord | None:
    """The first line of the log that names one of ``rows`` with a failure word, with the error it carries."""
    lines = [line.text for line in logs.clean_lines(data)]
    for i, text in enumerate(lines):
        named, failed = ROW.search(text), FAILED.search(text)
        if named is None or failed is None or int(named.group(1)) not in rows:
            continue
        word = FAILED.search(text, named.end())  # "sample 1 … error: X", or "error in sample 1: X"
        exc_type, message = error_of(text[word.end() if word else named.end():].lstrip(" :-"))
        after = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
        logged = b""
        if after is not None and lines[after].lstrip().startswith("Traceback (most recent call last)"):
            logged = "\n".join(lines[after:after + TRACEBACK_LINES]).encode()
        return RowWord(int(named.group(1)), text.strip(), exc_type, message, logged)
    return None


def error_of(text: str) -> tuple[str, str]:
    """``KeyError: 'x'`` as (KeyError, 'x'); ``[Errno 2] No such file…`` as Python's own OSError subclass for that
    errno with the whole text (str() of an OSError starts so); anything else as ("", text)."""
    named = NAMED.match(text)
    if named:
        return named.group(1), named.group(2)
    errno = ERRNO.match(text)
    if errno:
        return type(OSError(int(errno.group(1)), "")).__name__, text
    return "", text


def lifted(fault: Fault, word: RowWord) -> Fault:
    """The wrong output's fault, as the job's own error for the row: its traceback's when it logged one."""
    said = f"the job's own line for row {word.row}: {word.line}"
    excerpt = f"{said}\n{fault.log_excerpt}"
    if word.traceback:
        logged = fault_from_log(word.traceback, stage=fault.stage)
        if logged.frames:
            return replace(fault, exc_type=logged.exc_type, message=logged.message, frames=logged.frames,
                           caller_frames=(*logged.caller_frames, *fault.caller_frames),
                           fingerprint=logged.fingerprint, log_excerpt=excerpt)
    if not word.exc_type:  # the job said the row failed, not how: the check's fault, with the job's line
        return replace(fault, message=f"{fault.message}\n{said}", log_excerpt=excerpt)
    message = f"{word.message} (row {word.row}, as the job logged it: no traceback)"
    return replace(fault, exc_type=word.exc_type, message=message, log_excerpt=excerpt,
                   fingerprint=f"validate:{word.exc_type}:{normalise_message(word.message)}")


def said_in_log(host: Host, log: str, fault: Fault, rows: Collection[int], redact: Callable[[str], str]) -> Fault:
    """``fault`` (a wrong output missing ``rows``) lifted to what the job's log at ``log`` says of them, redacted;
    the fault as it was when the log is gone or says nothing of those rows."""
    try:
        word = said_of_rows(read_log(host, log), rows)
    except MedicError:
        return fault
    if word is None:
        return fault
    found = lifted(fault, word)
    return replace(found, message=redact(found.message), log_excerpt=redact(found.log_excerpt))
