"""A package's own later word on one of its functions: the first later release of the installed distribution
whose definition of that function differs, read from that release's wheel (tools/history.py: one file, by range
requests for a big wheel), and the installed file with that definition in place of the installed one — only when
every name it uses is one the installed module already has, or one that release's module binds by a top-level
import of another package (that import comes along: ``import torch`` beside a new
``_types_namespace={"torch": torch}``). A name the release defines itself, or imports from its own package, means
it needs more of that release than one function: nothing is taken.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from agent.repair.context import read_source
from agent.repair.edits import Source, free_names, replace_span
from agent.repair.releases import later_releases
from agent.repair.types import RepairContext
from tools.errors import SourceError
from tools.history import wheel_member

MAX_RELEASES = 16  # later releases read, one file of each, before saying none changed the function
Definition = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class LaterWord:
    text: str  # the installed file with the later definition in place
    dist: str
    release: str
    rel: str  # the file's path inside the package (``vllm/utils/cpu_triton_utils.py``)
    line: int  # where the later release defines it
    installed: str  # the installed release
    imports: tuple[str, ...] = ()  # the import statements of that release that came along

    def evidence(self, name: str) -> str:
        return f"{self.dist} {self.release} {self.rel}:{self.line}: def {name} (changed)"


def later_word(ctx: RepairContext, path: str, func: Definition, owner: str | None,
               most: int = MAX_RELEASES) -> LaterWord | None:
    src = read_source(ctx, path)
    releases = later_releases(ctx, path, most)
    if src is None or releases is None:
        return None
    dist, rel = releases.dist, releases.rel
    for release in releases.later:
        try:
            text = wheel_member(dist, release, rel.__eq__)
        except SourceError:
            continue
        newer = Source(rel, text) if text else None
        changed = newer and definition(newer.tree, owner, func.name)
        if not newer or not changed or ast.dump(changed) == ast.dump(func):
            continue
        # the first change is the later word: one that needs more of that release than this function is none
        brought = imports_for(src, newer, changed, package=rel.split("/")[0])
        if brought is None:
            return None
        text_after = in_place_of(src, func, newer, changed, brought)
        if text_after is None:
            return None
        return LaterWord(text_after, dist, release, rel, changed.lineno, releases.installed, tuple(brought))
    return None


def definition(tree: ast.Module, cls: str | None, name: str) -> Definition | None:
    """``name`` at the top of ``tree``, or in its top-level class ``cls``."""
    body: list[ast.stmt] = tree.body
    if cls is not None:
        owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        body = owner.body if owner else []
    return next((n for n in body if isinstance(n, Definition) and n.name == name), None)


def imports_for(src: Source, newer: Source, changed: Definition, package: str) -> list[str] | None:
    """The top-level import statements of ``newer`` that bind the names ``changed`` reads and the installed module
    lacks, each as that release wrote it ([] when none is missing); None when a missing name is bound any other
    way (that release defines it) or by an import from its own package (more of that release)."""
    missing = free_names(changed) - src.module_names() - set(dir(builtins))
    statements: list[str] = []
    for name in sorted(missing):
        binding = next((n for n in newer.tree.body if isinstance(n, ast.Import | ast.ImportFrom)
                        and name in {(a.asname or a.name).split(".")[0] for a in n.names}), None)
        if binding is None:
            return None
        roots = ({a.name.split(".")[0] for a in binding.names} if isinstance(binding, ast.Import)
                 else {"." if binding.level else (binding.module or "").split(".")[0]})
        if roots & {package, "."}:
            return None
        statement = ast.get_source_segment(newer.text, binding) or ""
        if statement and statement not in statements:
            statements.append(statement)
    return statements


def in_place_of(src: Source, func: Definition, newer: Source, changed: Definition,
                imports: list[str]) -> str | None:
    """The installed file's text with ``newer``'s definition ``changed`` in place of ``func``, and ``imports``
    after the installed module's own; None when it has an import below the function (no place above it that
    every reader of the module passes)."""
    start = min([func.lineno, *(d.lineno for d in func.decorator_list)])
    first = min([changed.lineno, *(d.lineno for d in changed.decorator_list)])
    body = reindent(newer, first, changed, src.indent_of(start))
    text = replace_span(src.text, src.pos(start, 0), src.end(func), body)
    if not imports:
        return text
    after = max((n.end_lineno or n.lineno for n in src.tree.body if isinstance(n, ast.Import | ast.ImportFrom)),
                default=0)
    if after >= start:
        return None
    lines = text.splitlines(keepends=True)
    return "".join([*lines[:after], *(f"{line}\n" for line in imports), *lines[after:]])


def reindent(src: Source, first: int, func: Definition, indent: str) -> str:
    """``func``'s lines (decorators from line ``first``) moved to ``indent``."""
    lines = src.text.splitlines()[first - 1:func.end_lineno]
    cut = len(src.indent_of(first))
    return "\n".join((indent + line[cut:]) if line.strip() else "" for line in lines)
