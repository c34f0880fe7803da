"""A Fault from a run's log, and the state update that makes a fault current (whoever found it: the scan, a
crash, the validator). diagnose, scan and validate record faults through this one function.

The root cause is picked by tools/tracebacks (a worker's traceback beats the driver's "see above"); the frames
medic may fix are gathered from EVERY traceback of the run, because a worker's root cause has no caller frames
and the line that fails is often not the line to fix. A process that died of something that is not a Python
exception (a CUDA or NCCL error, a signal: tools/fatal.py) is the root cause when it came first: the fault names
its first fatal line and process, and is ``fatal`` (no code patch is proposed for it).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from agent.codec import fault_to_dict
from agent.patch_records import FaultData, KeptPatch
from agent.repair.types import Fault, FaultStage, FrameRef
from agent.state import SessionState
from tools import env_scripts, logs, tracebacks
from tools.fatal import Fatal, first_fatal
from tools.fingerprint import normalise_message
from tools.log_types import Frame, Traceback
from tools.root_cause import explanatory_level

EXCERPT_LINES = 60
NOT_FOUND = "CommandNotFound"  # a program the run could not start: no code to patch, the report says where it looked


def fault_from_log(data: bytes, stage: FaultStage = "crash", where: Callable[[str], str] | None = None) -> Fault:
    """The root cause in a run's log. ``where(name)`` says where the target env was searched for a program the
    run could not find (agent/job.py where_looked); that fault is one of its own, whatever else the log holds."""
    lines = logs.clean_lines(data)
    excerpt = _excerpt(lines[-EXCERPT_LINES:])
    missing = env_scripts.not_found([line.text for line in lines])
    if missing:
        return not_found_fault(missing, stage, excerpt, where)
    found = tracebacks.extract_tracebacks(lines)
    root = tracebacks.root_cause(found)
    fatal = first_fatal(lines)
    # a fatal line before (or inside) the root traceback is what killed the process; wrappers and the
    # driver's later errors ("cancelled", "see above") are what it left behind
    if fatal is not None and (root is None or explanatory_level(root) > 0 or fatal.lineno <= root.last_lineno):
        return fatal_fault(fatal, lines, stage, raised_by(fatal, root))
    if root is None:
        said = interpreter_error(lines)
        if said is not None:  # the interpreter's own one-line death, not the wrapper's last words after it
            return said.fault(stage, excerpt)
        last = next((line.text for line in reversed(lines) if line.text.strip()), "(empty log)")
        return Fault(stage=stage, exc_type="NoTraceback", message=last, frames=(), log_excerpt=excerpt)
    callers: list[FrameRef] = []
    for tb in found:
        chain = [tb]
        while chain[-1].cause is not None:
            chain.append(chain[-1].cause)
        for link in chain:
            callers.extend(frame_refs(link.frames))
    return Fault(
        stage=stage,
        exc_type=root.exc_type or "UnknownError",
        message=root.message,
        # what torch.compile was tracing when it raised is where the job's code failed: the innermost frames
        frames=frame_refs((*root.frames, *root.traced)),
        caller_frames=tuple(callers),
        fingerprint=logs.fingerprint(root).key,
        proc=root.proc,
        log_excerpt=excerpt,
        warnings=logged_warnings(lines, root.first_lineno),
    )


# a WARNING record as the standard library's basicConfig (``WARNING:name:…``) and loguru (``… | WARNING  | mod:fn:12 -
# …``) write it; vLLM's own prefix (``WARNING 12-05 18:23:46 [file.py:66] …``) is read by tools/logs (LogLine.level)
WARNING_LINE = re.compile(r"^WARNING:[\w.]+:(?P<std>\S.*)$|\|\s*WARNING\s*\|\s*\S+\s+-\s+(?P<loguru>\S.*)$")
MAX_WARNINGS = 40


def logged_warnings(lines: list[logs.LogLine], before: int) -> tuple[str, ...]:
    """The distinct WARNING messages logged before line ``before``, oldest first (the last MAX_WARNINGS)."""
    said: dict[str, None] = {}
    for line in lines:
        if line.lineno >= before:
            break
        match = WARNING_LINE.search(line.text.strip()) if line.level is None else None
        if line.level == "WARNING" or match:
            said[((match["std"] or match["loguru"]) if match else line.text).strip()] = None
    return tuple(said)[-MAX_WARNINGS:]


# What CPython prints, as ``<sys.executable>: …``, when it dies before any traceback (Modules/main.c, runpy.py):
# a module ``-m`` cannot find, a script that is not there. A wrapper script goes on to say its own last words
# ("server died"); the process that died said this first.
INTERPRETER_ERROR = re.compile(
    r"^(?P<exe>/\S*python[0-9.]*): (?:Error while finding module specification for '[^']+' \((?P<exc>\w+): .*\)"
    r"|(?P<nomod>No module named \S+)|(?P<nofile>can't open file .+: \[Errno \d+\] .+)"
    r"|(?P<noexec>.+ is a package and cannot be directly executed))$")


@dataclass(frozen=True)
class InterpreterError:
    line: str
    exe: str  # the python that ran, as it names itself (sys.executable)
    exc_type: str

    def fault(self, stage: FaultStage, excerpt: str) -> Fault:
        return Fault(stage=stage, exc_type=self.exc_type, message=self.line, frames=(),
                     fingerprint="interpreter:" + normalise_message(self.line.split(": ", 1)[1])[:80],
                     proc=self.exe, log_excerpt=excerpt)


def interpreter_error(lines: list[logs.LogLine]) -> InterpreterError | None:
    """The first line by which a python interpreter said it could not start what it was given, or None."""
    for line in lines:
        match = INTERPRETER_ERROR.match(line.text.strip())
        if match is not None:
            exc = match["exc"] or ("ModuleNotFoundError" if match["nomod"] else
                                   "FileNotFoundError" if match["nofile"] else "ImportError")
            return InterpreterError(line.text.strip(), match["exe"], exc)
    return None


def ran_instead(fault: Fault, python: str) -> str | None:
    """When the process that died was a python other than the target's (the host's, named by the script or first
    on a PATH the script set): which one ran and which was meant, for the report."""
    exe = fault.proc if fault.message.startswith(f"{fault.proc}: ") else None
    if not exe or posixpath.dirname(exe) == posixpath.dirname(python):
        return None
    return f"{exe} ran it, a python that is not the target env's: {python} was meant"


def raised_by(fatal: Fatal, root: Traceback | None) -> tuple[FrameRef, ...]:
    """The stack of the Python exception whose own message the fatal line is (torch raises a failed CUDA call as
    ``torch.AcceleratorError: CUDA error: …``): where the call was made. A kernel's error may surface at a later
    call, so it is kept as the fault's frames for a repair that proves no kernel could have run (no device)."""
    said = root.message.splitlines()[0] if root is not None and root.message else ""
    if fatal.frames or root is None or not said or not fatal.line.endswith(said):
        return ()
    return frame_refs(root.frames)


def frame_refs(frames: Iterable[Frame]) -> tuple[FrameRef, ...]:
    """A log's frames as the repair engine takes them."""
    return tuple(FrameRef(f.file, f.line, f.func, f.code or "") for f in frames)


def fatal_fault(fatal: Fatal, lines: list[logs.LogLine], stage: FaultStage,
                raised: tuple[FrameRef, ...] = ()) -> Fault:
    at = next(i for i, line in enumerate(lines) if line.lineno >= fatal.lineno)
    return Fault(
        stage=stage,
        exc_type=fatal.kind,
        message=fatal.message,
        frames=raised or frame_refs(fatal.frames),
        fingerprint=fatal.key,
        proc=fatal.proc,
        log_excerpt=_excerpt(lines[max(0, at - 5) : at + EXCERPT_LINES - 5]),  # from where it died, not the teardown
        fatal=True,
    )


def _excerpt(lines: list[logs.LogLine]) -> str:
    return "\n".join(f"({line.proc}) {line.text}" if line.proc else line.text for line in lines)


def not_found_fault(missing: env_scripts.NotFound, stage: FaultStage, excerpt: str,
                    where: Callable[[str], str] | None = None) -> Fault:
    """A program the shell could not find (exit 127), with what was looked up and where: the target env's
    folders and entry points, and the PATH the job ran with. Nothing to patch: a person installs or names it."""
    env_side = where(missing.name) if where else ""
    said = f"`{missing.name}` was not found (exit {env_scripts.NOT_FOUND_EXIT}: {missing.line!r})"
    if "/" in missing.name:  # a path: no lookup, the file is not there
        message = f"{said}: {env_side or 'no such file'}"
    else:
        path = f"the PATH the job ran with ({missing.path})" if missing.path else "the PATH the job ran with"
        message = f"{said}: " + (f"{env_side}; " if env_side else "") + f"nor is it on {path}"
    return Fault(stage=stage, exc_type=NOT_FOUND, message=message, frames=(),
                 fingerprint=f"not_found:{missing.name}", log_excerpt=excerpt)
INNERMOST_FRAMES = 4  # the frames a fault event records


def record_fault(state: SessionState, fault: Fault, *, launch: Any, repeated: bool = False,
                 side: str | None = None, server: int | None = None) -> dict[str, Any]:
    """The state update for a new fault: it becomes current, joins the list, and its candidates start fresh.

    A fault that repeats right after a patch for it means the patch did not cure it: keep the tried list, so
    the next candidate gets its turn.
    """
    current = fault_to_dict(fault)
    if side:  # a two-process job: which process a fix touches; a server-side one restarts the server
        current["side"], current["server"] = side, server
    entry: FaultData = {**current, "launch": launch, "repeated": repeated}
    update: dict[str, Any] = {"fault": current, "faults": [*(state.get("faults") or []), entry], "candidates": []}
    if not repeated:
        update["tried"], update["declined"] = [], []
    return update


def model_patch_failed(frames: Iterable[tuple[str, int]], patches: list[KeptPatch], faults: list[FaultData]) -> bool:
    """Whether a new fault is the newest kept patch failing, when a model wrote that patch.

    A model's edit is a guess, not a repair derived from the installed source, so it must earn its place: a fault
    raised from a line it wrote, or passing through a line the fault it answered passed through (the same call
    sites: its edit did not get the job past them), counts as that patch failing, like the same fault coming
    back. It is reverted then, never left on disk. Only the innermost frames count (a fault event records
    four), so replay decides it from the trace alone.
    """
    if not model_patch_newest(patches):
        return False
    suspects: set[tuple[str, int]] = set()
    for file in patches[-1]["patch"].get("files") or []:
        try:
            for patched in PatchSet(file["diff"]):
                suspects |= {(file["path"], line.target_line_no) for hunk in patched for line in hunk
                             if line.is_added and line.target_line_no is not None}
        except UnidiffParseError:
            continue
    index = patches[-1].get("fault_index", -1)
    answered = faults[index] if 0 <= index < len(faults) else FaultData()
    suspects |= {(f["file"], f["line"]) for f in (answered.get("frames") or [])[-INNERMOST_FRAMES:]}
    return any(frame in suspects for frame in list(frames)[-INNERMOST_FRAMES:])


def model_patch_newest(patches: list[KeptPatch]) -> bool:
    """Whether the newest kept patch is a model's: then a wrong output after it is that patch failing."""
    return bool(patches) and patches[-1].get("origin") == "llm"


def answered_fault(state: SessionState) -> dict[str, Any]:
    """The fault the newest kept patch answered, as the current fault (to repair again once the patch is gone)."""
    faults, patches = state.get("faults") or [], state.get("patches") or []
    index = patches[-1].get("fault_index", -1) if patches else -1
    answered = faults[index] if faults and -len(faults) <= index < len(faults) else FaultData()
    return {k: v for k, v in answered.items() if k not in ("launch", "repeated")}
