"""Which traceback explains the failure: the earliest informative one, looking through chains and groups,
past the wrappers that only say "see above" and the noise of processes torn down after it. Import it from
``tools.logs``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tools.log_types import Traceback


@dataclass(frozen=True, slots=True)
class WrapperSignal:
    """Marks a traceback by its short exception name and/or a case-insensitive piece of its message."""

    exc_type: str | None = None
    message: str | None = None

    def matches(self, traceback: Traceback) -> bool:
        if self.exc_type is not None and traceback.short_type != self.exc_type:
            return False
        return self.message is None or self.message.lower() in traceback.message.lower()


# Tracebacks that only point elsewhere for their cause: vLLM's driver and engine re-raise worker failures so.
GENERIC_WRAPPER_SIGNALS: tuple[WrapperSignal, ...] = (
    WrapperSignal(message="please check the stack trace above for the root cause"),
    WrapperSignal(message="see root cause above"),
    WrapperSignal(message="see stack trace for root cause"),
    WrapperSignal(message="see stack trace (above) for the root cause"),
    WrapperSignal(message="enginecore encountered an issue"),
    WrapperSignal(message="engine core initialization failed"),
    WrapperSignal(message="initialization failed due to an exception in a background process"),
    WrapperSignal(exc_type="RuntimeError", message="worker failed"),
    # vLLM's shm_broadcast: the driver's read is cancelled once the executor shut down after a worker died
    WrapperSignal(exc_type="RuntimeError", message="cancelled"),
    # torch.multiprocessing.spawn re-raises a child's failure; the child's own traceback follows it
    WrapperSignal(exc_type="ProcessRaisedException"),
    # a child process that exited non-zero (subprocess.run(check=True)), and vLLM's re-raise of it with the child's
    # output: the child's own traceback, in that output, says why
    WrapperSignal(exc_type="CalledProcessError"),
    WrapperSignal(exc_type="RuntimeError", message="error raised in subprocess"),
    WrapperSignal(exc_type="EngineDeadError"),
    WrapperSignal(exc_type="EngineGenerateError"),
    WrapperSignal(exc_type="ExceptionGroup"),
    WrapperSignal(exc_type="BaseExceptionGroup"),
)
# Tracebacks of processes being torn down because something else already failed.
SHUTDOWN_NOISE_SIGNALS: tuple[WrapperSignal, ...] = (
    WrapperSignal(exc_type="KeyboardInterrupt"),
    WrapperSignal(exc_type="SystemExit"),
    WrapperSignal(exc_type="BrokenPipeError"),
    WrapperSignal(exc_type="CancelledError"),
)
_QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING"})  # logged and carried on: probably handled


def root_cause(tracebacks: Sequence[Traceback]) -> Traceback | None:
    """The traceback that explains the failure: the earliest informative one, looking through chains and
    groups; wrappers, teardown noise and handled (quietly logged) ones only when nothing better exists."""
    candidates = [node for traceback in tracebacks for node in _all_nodes(traceback)]
    # an exception with no message that a handler replaced by another ("During handling of the above
    # exception…": a StopIteration from next(), a bare KeyError) is the handler's control flow: the
    # exception it raised instead says what went wrong
    replaced = {id(node.cause) for node in candidates
                if node.context_kind == "context" and node.cause is not None and not node.cause.message.strip()}

    def rank(traceback: Traceback) -> tuple[int, int]:
        level, lineno = _explanatory_rank(traceback)
        return level + (1 if id(traceback) in replaced else 0), lineno

    return min(candidates, key=rank, default=None)


def explanatory_level(traceback: Traceback) -> int:
    """How well ``traceback`` explains a failure, 0 best: a root cause picked from one log is compared with
    another log's by this (their line numbers mean nothing to each other)."""
    return _explanatory_rank(traceback)[0]


def _all_nodes(traceback: Traceback) -> Iterator[Traceback]:
    for node in chain_of(traceback):
        yield node
        for member in node.exceptions:
            yield from _all_nodes(member)


def _explanatory_rank(traceback: Traceback) -> tuple[int, int]:
    if traceback.exc_type is None:
        rank = 4 if traceback.frames else 6
    elif any(signal.matches(traceback) for signal in GENERIC_WRAPPER_SIGNALS):
        rank = 5
    elif any(signal.matches(traceback) for signal in SHUTDOWN_NOISE_SIGNALS):
        rank = 3
    elif traceback.level in _QUIET_LEVELS:
        rank = 2
    else:
        rank = 0
    # Earliest first: the first exception raised is the cause of the ones printed after it.
    return rank, traceback.first_lineno


def chain_of(traceback: Traceback) -> Iterator[Traceback]:
    """``traceback``, then the exception printed before it in its chain, and so on back to the first."""
    node: Traceback | None = traceback
    while node is not None:
        yield node
        node = node.cause
