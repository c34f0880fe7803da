"""The plain types of a job's log, shared by the modules that read it: a cleaned line (tools/logs.py), a frame
and a traceback (tools/tracebacks.py), which the fingerprint and the root-cause choice read too. Kept apart so
those modules import their types from here and never from each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ChainKind = Literal["cause", "context"]


@dataclass(frozen=True, slots=True)
class LogLine:
    proc: str | None  # "Worker pid=1234", "EngineCore_DP0 pid=77"; None for the unprefixed driver
    level: str | None  # DEBUG / INFO / WARNING / ERROR / CRITICAL when a vLLM logger prefix was removed
    source: str | None  # "multiproc_executor.py:863" from that logger prefix
    text: str  # the message with every prefix, colour and control character removed
    lineno: int  # 1-based line of the log file (all redraws of one \r-line share it)
    timestamp: str | None = None  # "12-02 10:15:01" from the logger prefix; lines of one record share it


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    func: str  # "" for a frame printed without one (SyntaxError)
    code: str = ""


@dataclass(frozen=True, slots=True)
class Traceback:
    proc: str | None
    frames: tuple[Frame, ...]  # outermost first, as printed; at most MAX_FRAMES innermost ones
    # As written, qualified when the log qualifies it; None when the log stops before the exception line.
    exc_type: str | None
    message: str  # may span lines; at most MAX_MESSAGE_CHARS
    cause: Traceback | None  # the exception printed before this one in its chain
    context_kind: ChainKind | None  # "cause": raised from the cause; "context": raised while handling it
    first_lineno: int
    last_lineno: int
    exceptions: tuple[Traceback, ...] = ()  # members of an exception group
    level: str | None = None  # logger level when the traceback was logged through a vLLM logger
    omitted_frames: int = 0
    # torch.compile's "from user code:" after its message: the frames of the code it was tracing, outermost first
    traced: tuple[Frame, ...] = ()

    @property
    def short_type(self) -> str:
        return (self.exc_type or "").rpartition(".")[2]
