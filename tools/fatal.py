"""Deaths that are not Python exceptions: a CUDA or NCCL error, a signal (the OOM killer's SIGKILL, a segfault),
a process whose parent only says it died. The root cause of such a run is the FIRST fatal line of the process that
died, never the later "cancelled" / "see above" of the processes torn down after it.

Every pattern reads words that a library prints, and ``SAID`` names where each library prints them (a literal of
its installed source: torch's C++ headers, vLLM's and the standard library's Python files), so a test can hold the
patterns to the installed code rather than to one log. What the CUDA runtime or a shell print themselves (a
device-side assertion, "Killed") comes from the OS's own names for its signals, or from a log recorded on a GPU
(tests/data/logs/gpu_*.log).

``first_fatal(lines)`` gives the earliest fatal line with the process that died; tools never patch code for it.
"""

from __future__ import annotations

import hashlib
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from tools.fingerprint import normalise_message
from tools.log_types import Frame, LogLine


@dataclass(frozen=True, slots=True)
class Said:
    """Where a library prints the words a pattern reads: ``literal`` is in ``path`` of the installed ``package``
    (a top-level import name; the standard library's modules count as packages)."""

    package: str
    path: str
    literal: str


@dataclass(frozen=True, slots=True)
class Fatal:
    kind: str  # "CUDA error", "NCCL error", "signal 9 (SIGKILL)", "process died", …
    line: str  # the first fatal line, as printed (prefixes removed)
    lineno: int
    proc: str | None  # the process that died, as the log names it; None when nothing in the log says
    detail: tuple[str, ...] = ()  # the lines that go on with it, and the dead process's own report of the same fault
    frames: tuple[Frame, ...] = ()  # faulthandler's stack of the thread that crashed, outermost first

    @property
    def message(self) -> str:
        return "\n".join((self.line, *self.detail))

    @property
    def key(self) -> str:
        """What stays the same when the same fault happens again: its kind and the shape of its first line."""
        identity = f"{self.kind}\x1f{normalise_message(self.line)}"
        return "fatal:" + hashlib.sha256(identity.encode()).hexdigest()[:16]


# "<marker>" as torch's checks write it -> the kind of fault. cuBLAS/cuSPARSE failures read "CUDA error: CUBLAS_…".
_TORCH_HEADERS = "include/ATen/cuda/Exceptions.h"
LIBRARY_ERRORS: tuple[tuple[str, str, Said], ...] = (
    ("CUDA error: ", "CUDA error", Said("torch", _TORCH_HEADERS, '"CUDA error: "')),
    ("CUDA driver error: ", "CUDA driver error", Said("torch", _TORCH_HEADERS, '"CUDA driver error: "')),
    ("CUDA NVRTC error: ", "CUDA NVRTC error", Said("torch", _TORCH_HEADERS, '"CUDA NVRTC error: "')),
    ("cuDNN error: ", "cuDNN error", Said("torch", _TORCH_HEADERS, '"cuDNN error: "')),
    ("cuDNN Frontend error: ", "cuDNN error", Said("torch", _TORCH_HEADERS, '"cuDNN Frontend error: "')),
    ("cusolver error: ", "cuSOLVER error", Said("torch", _TORCH_HEADERS, '"cusolver error: "')),
    ("NCCL error in: ", "NCCL error",
     Said("torch", "include/torch/csrc/distributed/c10d/NCCLUtils.hpp", '"NCCL error in: "')),
    ("Watchdog caught collective operation timeout", "NCCL error",
     Said("torch", "lib/libtorch_cuda.so", "Watchdog caught collective operation timeout")),
    (" NCCL WARN ", "NCCL error", Said("nvidia", "nccl/lib/libnccl.so.2", "NCCL WARN")),
)
# A kernel's device-side assertion, as CUDA's __assert_fail prints it or torch's CUDA_KERNEL_ASSERT_PRINTF.
_DEVICE_ASSERT = re.compile(r"(?:\[CUDA_KERNEL_ASSERT\] )?\S+:\d+: .+?: block: \[\d+,\d+,\d+\], "
                            r"thread: \[\d+,\d+,\d+\]:? Assertion(?: failed:)? `.*`")
DEVICE_ASSERT_SAID = Said("torch", "include/torch/headeronly/macros/Macros.h", "block: [%d,%d,%d], thread: [%d,%d,%d]")

# Signals a process dies of by its own fault or the kernel's hand; TERM, INT, HUP and PIPE are how parents and
# people end processes after something else failed, so they name no root cause.
FATAL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE,
                           signal.SIGABRT})


def _describe(sig: signal.Signals) -> str:
    return " ".join((signal.strsignal(sig) or sig.name).replace("-", " ").lower().split())


# "segmentation fault" -> SIGSEGV: the C library's words for its signals, which shells and faulthandler print
# (faulthandler writes "Floating-point exception": compared without the hyphen).
_BY_DESCRIPTION = {_describe(sig): sig for sig in FATAL_SIGNALS}
_SHELL_REPORT = re.compile(r"(?:.*: line \d+: +(?P<pid>\d+) +)?(?P<desc>[A-Z][A-Za-z -]+?)(?: +\(core dumped\))?"
                           r"(?: {2,}.*)?")
FAULTHANDLER_SAID = Said("faulthandler", "", "Fatal Python error: ")  # CPython's C code: the CPU tests meet it live
_THREAD_HEADER = re.compile(r"(?:Current thread|Thread) 0x[0-9a-f]+ .*\(most recent call first\):")
_DUMP_FRAME = re.compile(r'  File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)')


@dataclass(frozen=True, slots=True)
class Notice:
    """A line by which one process says another died, and how: a signal's name or number, or nothing."""

    key: str  # a piece of text the line must hold, so most lines cost one substring search
    pattern: re.Pattern[str]  # groups: name / pid of the dead process, sig (SIGKILL) / num (9) of its signal
    said: Said
    implies: signal.Signals | None = None  # the signal the notice means when it names none


NOTICES: tuple[Notice, ...] = (
    Notice("exitcode=-", re.compile(r"<\w*Process name='(?P<name>[^']+)' pid=(?P<pid>\d+)[^>]*exitcode=-(?P<sig>\w+)"),
           Said("multiprocessing", "process.py", "'exitcode=%s'")),
    Notice("terminated with signal", re.compile(r"process (?P<name>\d+) terminated with signal (?P<sig>SIG\w+)"),
           Said("torch", "multiprocessing/spawn.py", "terminated with signal {name}")),
    Notice("received by PID", re.compile(r"Signal (?P<num>\d+) \((?P<sig>SIG\w+)\) received by PID (?P<pid>\d+)"),
           Said("torch", "distributed/elastic/multiprocessing/errors/__init__.py", " received by PID ")),
    Notice("(exitcode: -", re.compile(r"failed \(exitcode: -(?P<num>\d+)\) local_rank: (?P<name>\d+) "
                                      r"\(pid: (?P<pid>\d+)\)"),
           Said("torch", "distributed/elastic/multiprocessing/api.py", '"failed (exitcode: %s)"')),
    Notice("died with <Signals.", re.compile(r"Command '(?P<name>.+)' died with <Signals\.(?P<sig>SIG\w+): \d+>"),
           Said("subprocess", "", "died with %r.")),
    Notice("died with exit code -", re.compile(r"Process (?P<name>\S+) \(PID: (?P<pid>\d+)\) died with exit code "
                                               r"-(?P<num>\d+)"),
           Said("vllm", "v1/utils.py", "died with exit code {proc.exitcode}")),
    Notice("Failed core proc(s)", re.compile(r"Failed core proc\(s\): \{[^}]*?'(?P<name>[^']+)': -(?P<num>\d+)"),
           Said("vllm", "v1/engine/utils.py", "Failed core proc(s): {finished}")),
    Notice("died unexpectedly", re.compile(r"(?:Worker|Engine core) proc (?P<name>\S+) died unexpectedly"),
           Said("vllm", "v1/executor/multiproc_executor.py", "died unexpectedly, shutting down executor")),
    Notice("Out of memory: Killed process",
           re.compile(r"Out of memory: Killed process (?P<pid>\d+)(?: \((?P<name>[^)]+)\))?"),
           Said("kernel", "", "Out of memory: Killed process"), implies=signal.SIGKILL),  # the OOM killer, via dmesg
)
# The header a process's own traceback gets when its parent prints it: multiprocessing's "Process <name>:" and
# torch.multiprocessing.spawn's "-- Process <n> terminated with the following error:".
_PROCESS_HEADERS = (re.compile(r"Process (?P<name>[\w\-]+):"),
                    re.compile(r"-- Process (?P<name>\d+) terminated with the following error:"))
PROCESS_HEADERS_SAID = (Said("multiprocessing", "process.py", "'Process %s:\\n'"),
                        Said("torch", "multiprocessing/spawn.py", "terminated with the following error:"))
_SHELL_REPORT_CHARS = 400  # a shell's report of a job is short, so a long line is not one
_QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING"})
_DETAIL_LINES = 6
_LOOK_BACK = 60


def signal_kind(sig: signal.Signals) -> str:
    return f"signal {sig.value} ({sig.name})"


def first_fatal(lines: Sequence[LogLine]) -> Fatal | None:
    """The earliest fatal line of ``lines``, with the process that died and what goes on with it."""
    found = [(i, hit[0], hit[1]) for i, line in enumerate(lines) if (hit := classify(line)) is not None]
    if not found:
        return None
    i, kind, dead = found[0]
    line = lines[i]
    proc = dead or line.proc or _process_header(lines, i)
    detail = _goes_on(lines, i)
    # Unprefixed output (the CUDA runtime's printf, faulthandler) names no process: the dying process's own
    # report of the same fault, or its parent's notice of how it died, does.
    for j, later_kind, later_dead in found[1:]:
        if later_kind != kind and not (kind.startswith("signal") and later_kind == "process died"):
            continue
        named = later_dead or lines[j].proc or _process_header(lines, j)
        if named is None or (proc is not None and named != proc):
            continue
        if proc is None:
            proc = named
        if lines[j].proc == proc and lines[j].text not in detail:
            detail = (*detail, lines[j].text)
        break
    return Fatal(kind, line.text, line.lineno, proc, detail, _dump_frames(lines, i))


def classify(line: LogLine) -> tuple[str, str | None] | None:
    """(kind, the dead process when the line names another one) when ``line`` says a process died of a fault
    that is not a Python exception, else None."""
    text = line.text
    if line.level in _QUIET_LEVELS or not text.strip():
        return None
    for marker, kind, _ in LIBRARY_ERRORS:
        at = text.find(marker)
        if at >= 0 and "warning" not in text[:at].lower():  # torch also WARNs "CUDA driver error" and goes on
            return kind, None
    if "block: [" in text and _DEVICE_ASSERT.match(text):
        return "CUDA error", None
    if text.startswith("Fatal Python error: "):
        sig = _BY_DESCRIPTION.get(_normal(text[len("Fatal Python error: "):]))
        return (signal_kind(sig) if sig else "Fatal Python error"), None
    if len(text) < _SHELL_REPORT_CHARS and (shell := _SHELL_REPORT.fullmatch(text)) is not None:
        sig = _BY_DESCRIPTION.get(_normal(shell["desc"]))
        if sig is not None:
            return signal_kind(sig), (f"pid {shell['pid']}" if shell["pid"] else None)
    return _notice(text)


def _notice(text: str) -> tuple[str, str | None] | None:
    for notice in NOTICES:
        if notice.key not in text or (match := notice.pattern.search(text)) is None:
            continue
        name, pid, sig_name, number = (match.groupdict().get(group) for group in ("name", "pid", "sig", "num"))
        name = f"process {name}" if name and name.isdigit() else name  # torch numbers its children
        dead = " ".join(part for part in (name, f"pid {pid}" if pid else None) if part) or None
        sig = _signal_of(sig_name, number) or notice.implies
        if sig is None:  # the notice says only that it died
            return ("process died", dead) if sig_name is None and number is None else None
        return (signal_kind(sig), dead) if sig in FATAL_SIGNALS else None
    return None


def _signal_of(name: str | None, number: str | None) -> signal.Signals | None:
    try:
        if name and name.startswith("SIG"):
            return signal.Signals[name]
        if number or (name and name.isdigit()):
            return signal.Signals(int(number or name or 0))
    except (KeyError, ValueError):
        return None
    return None


def _normal(description: str) -> str:
    return " ".join(description.replace("-", " ").lower().split())


def _process_header(lines: Sequence[LogLine], i: int) -> str | None:
    """The process a parent printed a child's traceback for ("Process SpawnProcess-1:"), looking back from ``i``
    through the lines of the same stream."""
    proc = lines[i].proc
    for line in reversed(lines[max(0, i - _LOOK_BACK) : i]):
        if line.proc != proc:
            continue
        for header in _PROCESS_HEADERS:
            if (match := header.fullmatch(line.text.strip())) is not None:
                name = match["name"]
                return f"process {name}" if name.isdigit() else name
    return None


def _goes_on(lines: Sequence[LogLine], i: int) -> tuple[str, ...]:
    """The lines that continue line ``i``'s report: same process and logger record, up to a blank line, a
    traceback, a repeat of the same kind of line, or faulthandler's stack."""
    head, out = lines[i], []
    for line in lines[i + 1 : i + 1 + _DETAIL_LINES]:
        text = line.text
        same = (line.proc, line.level, line.source) == (head.proc, head.level, head.source)
        if not same or not text.strip() or text.startswith(("Traceback", "  File ")) or _THREAD_HEADER.match(text):
            break
        if classify(line) == classify(head) and _DEVICE_ASSERT.match(text):
            continue  # the same assertion from the kernel's other threads
        out.append(text)
    return tuple(out)


def _dump_frames(lines: Sequence[LogLine], i: int) -> tuple[Frame, ...]:
    """faulthandler's stack of the crashing thread (printed innermost first) when it follows line ``i``."""
    frames: list[Frame] = []
    proc, j = lines[i].proc, i + 1
    while j < len(lines) and j <= i + 3 and not _THREAD_HEADER.match(lines[j].text):
        j += 1
    if j >= len(lines) or lines[j].proc != proc or not _THREAD_HEADER.match(lines[j].text):
        return ()
    for line in lines[j + 1 :]:
        match = _DUMP_FRAME.fullmatch(line.text) if line.proc == proc else None
        if match is None:
            break
        frames.append(Frame(match["file"], int(match["line"]), match["func"].strip()))
    return tuple(reversed(frames))
