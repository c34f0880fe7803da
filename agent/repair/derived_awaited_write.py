"""Derived repair for a file the library hands out while it still writes it: the caller moved (opened, read) a path
the library's answer named, and the file was not there yet. vLLM's hidden-states connector answers a request once
its device-to-host copy is done and writes the file from a thread pool after; speculators 0.5.0's script moves
the file the moment the answer comes.

The chain is read, never guessed:
- the fault is a ``FileNotFoundError`` naming a path, raised under a call that a statement of the code medic may
  fix makes (``shutil.move(path, …)``, or ``shutil.move`` handed to ``asyncio.to_thread`` with the path);
- the library says how to wait for its write: one of its functions takes a path and holds a shared
  ``fcntl.flock`` on ``path + SUFFIX`` (vLLM's ``load_hidden_states``: "Blocks … until the async write is
  complete by acquiring a shared flock on the companion lock file"), and the same file holds the exclusive lock on
  ``<name> + SUFFIX`` that the writer keeps while it writes;
- that companion of the very path exists on the host: the library made it for this file.
The repair puts the library's own wait before the caller's statement — a shared lock on the companion, taken when
the companion exists, as speculators' next release does — so the caller goes on once the writer let go.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from agent.repair.context import candidate, evidence_line, fixable_frames, grep_sources, read_source
from agent.repair.edits import Source, insert_before_statement, last_name
from agent.repair.types import Candidate, Check, Fault, RepairContext

ORIGIN = "derived:awaited_write"
MISSING = re.compile(r"No such file or directory: '([^']+)'")
WAITER = "_medic_written"  # the name the inserted wait binds its open companion to


@dataclass(frozen=True)
class Wait:
    """The library's own wait for a file it writes: ``func(param)`` locks ``param + suffix`` shared."""

    path: str
    line: int
    func: str
    suffix: str
    writer_line: int  # where the same file takes the exclusive lock on ``… + suffix``


def awaited_write(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None or not fault.exc_type.endswith("FileNotFoundError"):
        return []
    named = MISSING.search(fault.message)
    if named is None:
        return []
    missing = named.group(1)
    called = {f.func for f in fault.frames if not ctx.is_fixable(f.file)}  # what raised, outside the person's code
    for wait in library_waits(ctx):
        if not ctx.host.exists(missing + wait.suffix):
            continue  # the library made no companion for this file: its lock says nothing of it
        for frame in fixable_frames(ctx, fault):
            src = read_source(ctx, frame.file)
            stmt = src.statement_at(frame.line) if src is not None else None
            used = path_argument(stmt, called) if stmt is not None else None
            if src is not None and stmt is not None and used is not None:
                return [waited(ctx, src, stmt, src.segment(used), wait, missing, frame.line)]
    return []


def library_waits(ctx: RepairContext) -> list[Wait]:
    """Each function of a library package that takes a path and locks ``path + <suffix>`` shared, in a file that
    also locks ``… + <suffix>`` exclusively (the writer's side)."""
    found: list[Wait] = []
    for package in ctx.library_packages:
        for src in grep_sources(ctx, package, r"\bLOCK_SH\b"):
            writers = locked(src.tree, "LOCK_EX")
            for func in ast.walk(src.tree):
                if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) and func.args.args:
                    shared = locked(func, "LOCK_SH", {a.arg for a in func.args.args})
                    found += [Wait(src.path, func.lineno, func.name, suffix, writers[suffix])
                              for suffix in shared if suffix in writers]
    return found


def locked(scope: ast.AST, mode: str, params: set[str] | None = None) -> dict[str, int]:
    """The companions ``scope`` takes ``fcntl.flock(…, <mode>)`` on, by the suffix its ``<name> + "<suffix>"``
    adds (to one of ``params`` when given), with the line of the lock."""
    suffixes = [node.right.value for node in ast.walk(scope)
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)
                and node.right.value.startswith(".")
                and (params is None or (isinstance(node.left, ast.Name) and node.left.id in params))]
    calls = [node for node in ast.walk(scope) if isinstance(node, ast.Call)
             and last_name(node.func) == "flock" and len(node.args) == 2 and last_name(node.args[1]) == mode]
    return {suffix: calls[0].lineno for suffix in suffixes} if calls else {}


def path_argument(stmt: ast.stmt, called: set[str]) -> ast.expr | None:
    """The argument a call of the statement gives the library function that raised: ``f(path, …)``, or ``f``
    handed on with its arguments after it (``asyncio.to_thread(f, path, …)``, ``run_in_executor(None, f, path)``)."""
    for call in (node for node in ast.walk(stmt) if isinstance(node, ast.Call)):
        if last_name(call.func) in called and call.args:
            return call.args[0]
        for i, arg in enumerate(call.args[:-1]):
            if last_name(arg) in called:
                return call.args[i + 1]
    return None


def waited(ctx: RepairContext, src: Source, stmt: ast.stmt, used: str, wait: Wait, missing: str,
           line: int) -> Candidate:
    where = f"{wait.path.rsplit('/', 1)[-1]}:{wait.line}"
    companion = f"str({used}) + {wait.suffix!r}"
    text = insert_before_statement(src, stmt.lineno, [
        f"if os.path.exists({companion}):  # held by the writer until the file is whole: {wait.func}() waits so",
        f"    with open({companion}) as {WAITER}:",
        f"        fcntl.flock({WAITER}, fcntl.LOCK_SH)",
    ])
    text = with_imports(Source(src.path, text), ("fcntl", "os"))
    why = (f"the library answered with {missing.rsplit('/', 1)[-1]} before writing it: its writer holds "
           f"{wait.suffix!r} beside the file exclusively until the file is whole ({wait.path}:{wait.writer_line}), "
           f"and its own reader {wait.func}() ({where}) waits by locking that companion shared; the caller used the "
           f"path at once. Wait as the library's reader does, before {src.path.rsplit('/', 1)[-1]}:{line}")
    evidence = (evidence_line(src.path, line, src.line(line)),
                f"{wait.path}:{wait.line}: def {wait.func}(…): fcntl.flock(…{wait.suffix!r}…, LOCK_SH)",
                f"{wait.path}:{wait.writer_line}: fcntl.flock(…, LOCK_EX) on … + {wait.suffix!r}",
                f"{missing}{wait.suffix} exists on the host: the library's companion of this very file")
    grep = Check("grep", src.path, re.escape(f"fcntl.flock({WAITER}, fcntl.LOCK_SH)"))
    return candidate(ctx, {src.path: text}, origin=ORIGIN, rationale=why, evidence=evidence, extra_checks=(grep,))


def with_imports(src: Source, modules: tuple[str, ...]) -> str:
    """The text with ``import <m>`` for each module it does not import, before its first import (after its
    docstring and ``from __future__`` lines, which must stay first), or at its end when it has no other statement."""
    have = {alias.name for node in src.tree.body if isinstance(node, ast.Import) for alias in node.names
            if alias.asname is None}
    wanted = [f"import {m}" for m in modules if m not in have]
    if not wanted:
        return src.text
    body = list(src.tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the module's docstring
    rest = [node for node in body if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")]
    first = next((node for node in rest if isinstance(node, ast.Import | ast.ImportFrom)), rest[0] if rest else None)
    if first is None:
        return src.text + ("" if src.text.endswith("\n") or not src.text else "\n") + "".join(f"{m}\n" for m in wanted)
    return insert_before_statement(src, first.lineno, wanted)
