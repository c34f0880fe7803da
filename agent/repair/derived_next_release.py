"""Derived repair from the fixable package's own next release: the function the failure runs through in the
installed package was changed in the package's next release, its maintainers' later word on that very code.

The next release's definition of that function (read from its wheel on the registry: tools/history.py) takes the
place of the installed one, when every name it uses is one the installed module already has (else the change
needs more of that release than one function, and nothing is proposed). It is a candidate like any other: it
compiles, the module imports while the next launch loads, and the run decides.
"""

from __future__ import annotations

import ast
import builtins

from agent.repair.context import candidate, evidence_line, fixable_frames, module_of, read_source
from agent.repair.edits import Source, free_names, replace_span
from agent.repair.releases import later_releases
from agent.repair.types import Candidate, Fault, RepairContext
from tools.errors import SourceError
from tools.history import wheel_member

Definition = ast.FunctionDef | ast.AsyncFunctionDef


def next_release_function(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None:
        return []
    for frame in fixable_frames(ctx, fault):
        module = module_of(ctx, frame.file)
        src = read_source(ctx, frame.file) if module else None
        func = src.enclosing_function(frame.line) if src else None
        if not module or src is None or func is None or func.name != frame.func:
            continue
        package = module.split(".")[0]
        owner = src.enclosing_class(frame.line)
        releases = later_releases(ctx, frame.file, 1)
        if releases is None or not releases.later:
            continue
        following, rel = releases.later[0], releases.rel
        try:
            text = wheel_member(releases.dist, following, rel.__eq__)
        except SourceError:
            continue
        newer = Source(rel, text) if text else None
        changed = newer and definition(newer.tree, owner.name if owner else None, func.name)
        if not newer or not changed or ast.dump(changed) == ast.dump(func):
            continue  # the next release has no such function, or left it as it is
        text_after = in_place_of(src, func, newer, changed)
        if text_after is None:
            continue  # it uses names the installed module lacks: more than one function changed
        where = f"{owner.name}.{func.name}" if owner else func.name
        why = (f"the failure runs through {where} in {package} {releases.installed}; {package} {following}, its next "
               f"release, changed that function: take its definition (every name it uses is in the installed "
               f"module)")
        return [candidate(ctx, {frame.file: text_after}, origin="derived:next_release", rationale=why,
                          evidence=[evidence_line(frame.file, frame.line, src.line(frame.line)),
                                    f"{package} {following} {rel}:{changed.lineno}: def {func.name} (changed)"])]
    return []


def definition(tree: ast.Module, cls: str | None, name: str) -> Definition | None:
    """``name`` at the top of ``tree``, or in its top-level class ``cls``."""
    body: list[ast.stmt] = tree.body
    if cls is not None:
        owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        body = owner.body if owner else []
    return next((n for n in body if isinstance(n, Definition) and n.name == name), None)


def in_place_of(src: Source, func: Definition, newer: Source, changed: Definition) -> str | None:
    """The installed file's text with ``newer``'s definition ``changed`` in place of ``func``; None when it uses
    names the installed module lacks (it needs more of that release than this one function)."""
    if free_names(changed) - src.module_names() - set(dir(builtins)):
        return None
    start = min([func.lineno, *(d.lineno for d in func.decorator_list)])
    first = min([changed.lineno, *(d.lineno for d in changed.decorator_list)])
    body = reindent(newer, first, changed, src.indent_of(start))
    return replace_span(src.text, src.pos(start, 0), src.end(func), body)


def reindent(src: Source, first: int, func: Definition, indent: str) -> str:
    """``func``'s lines (decorators from line ``first``) moved to ``indent``."""
    lines = src.text.splitlines()[first - 1:func.end_lineno]
    cut = len(src.indent_of(first))
    return "\n".join((indent + line[cut:]) if line.strip() else "" for line in lines)
