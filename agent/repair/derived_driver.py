"""Derived repairs of the user's driver from Python's own words.

- the missing ``__main__`` guard: under the 'spawn' start method (which CUDA forces) a child process re-imports
  the main module; a driver that starts its work at top level starts a process again from the child, and
  Python's own check (in the target env's ``multiprocessing``) raises "An attempt has been made to start a new
  process before the current process has finished its bootstrapping phase … the proper idiom in the main
  module: if __name__ == '__main__': …". The raise is read from the installed source at the fault's innermost
  frame (the target env's ``multiprocessing.spawn`` if no frame shows it); its message must be the fault's,
  and the idiom is the one it names. The driver is the workdir file the traceback re-imports (its ``<module>``
  frame); its top-level work goes under that guard (agent/repair/main_guard.py), definitions stay.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterator

from agent.repair.context import candidate, evidence_line, read_source
from agent.repair.main_guard import guard_module
from agent.repair.types import Candidate, Check, Fault, FrameRef, RepairContext
from tools import source as src_tools
from tools.errors import MedicError

IDIOM = re.compile(r"^\s*(if\s+__name__\s*==\s*(['\"])__main__\2\s*:)\s*$", re.M)
MODULE_FRAME = "<module>"
SPAWN_MODULE = "multiprocessing.spawn"  # where the interpreter keeps the check when no frame shows its raise


def main_guard(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None or not fault.message.strip():
        return []
    raised = idiom_asked_for(ctx, fault)
    if raised is None:
        return []
    idiom, at = raised
    driver = reimported_driver(ctx, fault)
    if driver is None:
        return []
    src = read_source(ctx, driver.file)
    if src is None:
        return []
    rewrite = guard_module(src.text, idiom)
    if rewrite is None:
        return []
    moved = f"{len(rewrite.work)} statement(s) from line {rewrite.work[0]} to line {rewrite.work[-1]}"
    why = (f"{at} raises this when a process is started while the main module is being imported, and names the "
           f"idiom `{idiom}`: a spawned child re-imports {driver.file.rsplit('/', 1)[-1]} (line {driver.line} is "
           f"its top-level work), so that work ({moved}) goes under the guard; imports, "
           f"definitions and constants stay where a child finds them")
    evidence = (evidence_line(driver.file, driver.line, driver.code or src.line(driver.line)),
                f"{at}: {idiom}")
    grep = Check("grep", driver.file, "^" + re.escape(idiom.strip()) + r"\s*$")
    return [candidate(ctx, {driver.file: rewrite.text}, origin="derived:main_guard", rationale=why,
                      evidence=evidence, extra_checks=(grep,))]


def idiom_asked_for(ctx: RepairContext, fault: Fault) -> tuple[str, str] | None:
    """(the idiom, where it is raised) when the fault's message is a raise in the installed interpreter whose
    text names a ``__main__`` guard."""
    for path, line in raise_sites(ctx, fault):
        src = read_source(ctx, path)
        if src is None:
            continue
        for node in ast.walk(src.tree):
            if not isinstance(node, ast.Raise) or (line and not node.lineno <= line <= (node.end_lineno or 0)):
                continue
            text = raised_text(node)
            match = IDIOM.search(text or "")
            if text and match and same_words(text, fault.message):
                return match[1], f"{path}:{node.lineno}"
    return None


def raise_sites(ctx: RepairContext, fault: Fault) -> Iterator[tuple[str, int]]:
    """The fault's innermost frame outside the fixable code; then, for a message that speaks of ``__main__`` (a
    log that kept the message but not the raising frame), the target interpreter's spawn module (any line)."""
    yield from [(f.file, f.line) for f in reversed(fault.frames) if not ctx.is_fixable(f.file)][:1]
    if "__main__" in fault.message:
        with contextlib.suppress(MedicError):
            yield src_tools.module_path(ctx.host, ctx.python, SPAWN_MODULE), 0


def raised_text(node: ast.Raise) -> str | None:
    exc = node.exc
    if isinstance(exc, ast.Call) and exc.args and isinstance(exc.args[0], ast.Constant):
        value = exc.args[0].value
        return value if isinstance(value, str) else None
    return None


def same_words(template: str, message: str) -> bool:
    """The log's message is the raise's text, whatever the log did to its line breaks and indentation."""
    a, b = " ".join(template.split()), " ".join(message.split())
    return bool(b) and (a == b or (len(b) >= 40 and a.startswith(b)))


def reimported_driver(ctx: RepairContext, fault: Fault) -> FrameRef | None:
    """The workdir file whose top level was running when the process started: its ``<module>`` frame, the
    root cause's own first (that is the child's re-import), then any other traceback's."""
    workdir = ctx.workdir.rstrip("/") + "/"
    for frame in (*fault.frames, *fault.caller_frames):
        if ctx.workdir and frame.func == MODULE_FRAME and frame.file.startswith(workdir):
            return frame
    return None

