"""Calls within the code medic may fix: which function of a fixable package (or of the workdir) a call reaches.

Resolved by reading the files with ast, never by importing them: ``helper(...)`` defined in the same module or
imported from a fixable module (absolute or relative import), ``mod.helper(...)`` through an imported fixable
module, and ``self.helper(...)`` a method of the class the call is made in. A module of a fixable package is
looked for next to the calling file first (the same site-packages), then where the target's python finds it.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator

from agent.repair.context import read_source
from agent.repair.edits import Source
from agent.repair.types import RepairContext
from tools import source as src_tools
from tools.errors import MedicError

Function = ast.FunctionDef | ast.AsyncFunctionDef


def top_function(tree: ast.Module | ast.ClassDef, name: str) -> Function | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name),
                None)


def module_source(ctx: RepairContext, src: Source, module: str, level: int = 0) -> Source | None:
    """The fixable module ``module`` (``level`` dots of a relative import) as seen from ``src`` (memoized)."""
    key = f"callgraph:{src.path}:{level}:{module}"
    if key not in ctx.memo:  # where the module is, not its text: a patch changes the text within a session
        found = find_module(ctx, src, module, level)
        ctx.memo[key] = found.path if found else None
    path: str | None = ctx.memo[key]
    return read_source(ctx, path) if path else None


def find_module(ctx: RepairContext, src: Source, module: str, level: int) -> Source | None:
    rel = module.replace(".", "/") if module else ""
    candidates: list[str] = []
    if level:
        base = posixpath.dirname(src.path)
        for _ in range(level - 1):
            base = posixpath.dirname(base)
        candidates.append(posixpath.join(base, rel) if rel else base)
    else:
        top = module.split(".")[0]
        at = src.path.rfind(f"/{top}/")
        if top in ctx.fixable_packages and at >= 0:
            candidates.append(src.path[: at + 1] + rel)
        if ctx.in_own_code(src.path):  # a module next to a job's script
            candidates.append(posixpath.join(posixpath.dirname(src.path), rel))
    for stem in candidates:
        for path in (stem + ".py", stem + "/__init__.py"):
            if ctx.is_fixable(path) and (found := read_source(ctx, path)) is not None:
                return found
    if not level and module.split(".")[0] in ctx.fixable_packages and src.path.rfind(f"/{module.split('.')[0]}/") < 0:
        try:  # a script outside the package (the job's driver): where the target's python finds the module
            path = src_tools.module_path(ctx.host, ctx.python, module)
        except MedicError:
            return None
        return read_source(ctx, path) if ctx.is_fixable(path) else None
    return None


def imported(ctx: RepairContext, src: Source, name: str) -> tuple[Source, str] | None:
    """The fixable module a top-level import of ``src`` binds ``name`` from, and the name there ("" for a
    module bound by ``import x as name`` / ``from pkg import module``)."""
    for node in src.tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                module = module_source(ctx, src, node.module or "", node.level)
                if module is not None and top_function(module.tree, alias.name) is not None:
                    return module, alias.name
                whole = module_source(ctx, src, ".".join(p for p in (node.module, alias.name) if p), node.level)
                return (whole, "") if whole is not None else None
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == name:
                    found = module_source(ctx, src, alias.name)
                    return (found, "") if found is not None else None
    return None


def enclosing_class(ctx: RepairContext, src: Source, lineno: int) -> ast.ClassDef | None:
    """The innermost class of ``src`` around ``lineno`` (its classes listed once per parsed file)."""
    key = f"callgraph:classes:{src.path}"
    if key not in ctx.memo or ctx.memo[key][0] is not src.tree:
        ctx.memo[key] = (src.tree, [n for n in ast.walk(src.tree) if isinstance(n, ast.ClassDef)])
    around = [c for c in ctx.memo[key][1] if c.lineno <= lineno <= (c.end_lineno or c.lineno)]
    return max(around, key=lambda c: c.lineno, default=None)


def callee_function(ctx: RepairContext, src: Source, call: ast.Call) -> tuple[Source, Function] | None:
    """The fixable function ``call`` reaches, with the file it is in; None for anything else."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id == "self":
            owner = enclosing_class(ctx, src, call.lineno)
            method = top_function(owner, func.attr) if owner else None
            return (src, method) if method else None
        found = imported(ctx, src, func.value.id)
        if found is not None and not found[1]:
            helper = top_function(found[0].tree, func.attr)
            return (found[0], helper) if helper else None
        return None
    if not isinstance(func, ast.Name):
        return None
    here = top_function(src.tree, func.id)
    if here is not None:
        return src, here
    found = imported(ctx, src, func.id)
    if found is None or not found[1]:
        return None
    helper = top_function(found[0].tree, found[1])
    return (found[0], helper) if helper else None


def calls_in(node: ast.AST) -> Iterator[ast.Call]:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            yield inner


def reached(ctx: RepairContext, src: Source, node: ast.AST) -> Iterator[tuple[ast.Call, Source, Function]]:
    """Each call in ``node`` that reaches a fixable function: (the call, the function's file, the function)."""
    for call in calls_in(node):
        found = callee_function(ctx, src, call)
        if found is not None:
            yield call, *found


def bind_constants(helper: Function, call: ast.Call, *, method: bool) -> dict[str, ast.expr]:
    """The helper's parameters that ``call`` fills with constants (or leaves to constant defaults)."""
    params = [*helper.args.posonlyargs, *helper.args.args][1 if method else 0 :]
    bound: dict[str, ast.expr] = {}
    for param, default in zip(reversed(params), reversed(helper.args.defaults), strict=False):
        bound[param.arg] = default
    for param, kw_default in zip(helper.args.kwonlyargs, helper.args.kw_defaults, strict=False):
        if kw_default is not None:
            bound[param.arg] = kw_default
    for param, arg in zip(params, call.args, strict=False):
        bound[param.arg] = arg
    bound.update({k.arg: k.value for k in call.keywords if k.arg})
    return {name: value for name, value in bound.items() if isinstance(value, ast.Constant)}
