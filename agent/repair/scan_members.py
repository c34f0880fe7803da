"""Scan rule for functions grafted onto the library's objects: ``types.MethodType(fn, obj)`` makes ``fn`` a
method of ``obj``, so each ``self.<name>(...)`` in ``fn`` needs ``obj``'s class to have ``<name>``.

The class is derived, not listed: the model the library builds is the one its registry maps the TARGET's
architecture (config.json) to; an attribute of it (``model.model``) is what that class's ``__init__`` assigns,
through a factory method if need be. Unknown at any step: no finding (the canary will show it).
"""

from __future__ import annotations

import ast
import contextlib
import re

from agent.repair.context import library_definitions, library_grep, module_file, module_of, read_source
from agent.repair.edits import Source, assignment_before
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
from tools import source as src_tools
from tools.errors import MedicError

ClassRef = tuple[str, str]  # (module, class name)
# How worker-side code reaches the model the library built (vLLM: the worker's model runner holds it).
BUILT_MODEL = re.compile(r"(^|\.)(model_runner\.model|get_model\(\))$")
MAX_DEPTH = 6


def grafted_member_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    faults: list[Fault] = []
    for src in sources:
        graft_fns = {n.name: n for n in src.tree.body if isinstance(n, ast.FunctionDef)}
        for call in (n for n in ast.walk(src.tree) if isinstance(n, ast.Call) and len(n.args) == 2):
            if not ast.unparse(call.func).endswith("MethodType") or not isinstance(call.args[0], ast.Name):
                continue
            fn = graft_fns.get(call.args[0].id)
            where = src.enclosing_function(call.lineno)
            if fn is None or where is None or not fn.args.args:
                continue
            owner = object_class(ctx, src, where, call.args[1], call.lineno, 0)
            members = class_member_names(ctx, owner) if owner else set()
            if owner is None or not members:
                continue
            ours = {t.attr for n in ast.walk(src.tree) if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Attribute) and ast.unparse(t.value) == ast.unparse(call.args[1])}
            me = fn.args.args[0].arg
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == me
                        and node.func.attr not in members | ours):
                    frame = FrameRef(src.path, node.lineno, fn.name, src.line(node.lineno).strip())
                    faults.append(Fault(
                        "scan", "AttributeError", f"'{owner[1]}' object has no attribute '{node.func.attr}'",
                        (frame,), fingerprint=f"scan:graft:{src.path}:{fn.name}:{node.func.attr}",
                        log_excerpt=f"predicted by the scan: {fn.name} is grafted onto {owner[0]}:{owner[1]} "
                                    f"(types.MethodType at {src.path}:{call.lineno})",
                        finding=Finding("grafted_member", callee=owner[1], name=node.func.attr)))
    return faults


def class_member_names(ctx: RepairContext, owner: ClassRef) -> set[str]:
    key = f"members:{owner[0]}:{owner[1]}"
    if key not in ctx.memo:
        try:
            members = src_tools.class_members(ctx.host, ctx.python, f"{owner[0]}:{owner[1]}", all_bases=True)
            ctx.memo[key] = {m.name for m in members}
        except MedicError:
            ctx.memo[key] = set()
    return set(ctx.memo[key])


def object_class(ctx: RepairContext, src: Source, func: ast.AST, expr: ast.expr, line: int, depth: int
                 ) -> ClassRef | None:
    """The library class of ``expr`` at ``line`` in our ``func``, when the source says it."""
    if depth > MAX_DEPTH:
        return None
    if BUILT_MODEL.search(ast.unparse(expr)):
        return built_model_class(ctx)
    if isinstance(expr, ast.Name):
        assign = assignment_before(func, expr.id, line)
        return object_class(ctx, src, func, assign.value, assign.lineno, depth + 1) if assign else None
    if isinstance(expr, ast.Attribute):
        base = object_class(ctx, src, func, expr.value, line, depth + 1)
        return attribute_class(ctx, base, expr.attr) if base else None
    return None


def built_model_class(ctx: RepairContext) -> ClassRef | None:
    """The library class its model registry maps the target's architecture to (else one of that name)."""
    for arch in ctx.architectures:
        entry = re.compile(rf'"{re.escape(arch)}"\s*:\s*\(\s*"(\w+)"\s*,\s*"(\w+)"\s*\)')
        for package in ctx.library_packages:
            with contextlib.suppress(MedicError):
                for hit in library_grep(ctx, package, entry.pattern, max_hits=5):
                    match, registry = entry.search(hit.text), module_of(ctx, hit.path)
                    if match and registry:
                        return f"{registry.rsplit('.', 1)[0]}.{match[1]}", match[2]
        found = [d for d in library_definitions(ctx, arch) if d.kind == "class"]
        if found:
            return found[0].module, found[0].name
    return None


def class_def(ctx: RepairContext, ref: ClassRef) -> tuple[Source, ast.ClassDef] | None:
    try:
        path = module_file(ctx, ref[0])
    except MedicError:
        return None
    lib = read_source(ctx, path)
    node = next((n for n in lib.tree.body if isinstance(n, ast.ClassDef) and n.name == ref[1]), None) if lib else None
    return (lib, node) if lib and node else None


def name_class(ctx: RepairContext, module: str, lib: Source, name: str) -> ClassRef | None:
    if any(isinstance(n, ast.ClassDef) and n.name == name for n in lib.tree.body):
        return module, name
    origin = lib.imported_from(name)
    return (origin, name) if origin else None


def attribute_class(ctx: RepairContext, owner: ClassRef, attr: str) -> ClassRef | None:
    """What ``owner.__init__`` assigns to ``self.<attr>``: ``Cls(...)``, or ``self.factory(...)`` returning one."""
    found = class_def(ctx, owner)
    if found is None:
        return None
    lib, klass = found
    methods = {n.name: n for n in klass.body if isinstance(n, ast.FunctionDef)}
    init = methods.get("__init__")
    for node in ast.walk(init) if init else []:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and any(ast.unparse(t) == f"self.{attr}" for t in node.targets)):
            continue
        func = node.value.func
        if isinstance(func, ast.Name):
            return name_class(ctx, owner[0], lib, func.id)
        if isinstance(func, ast.Attribute) and ast.unparse(func.value) == "self" and func.attr in methods:
            for ret in ast.walk(methods[func.attr]):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Call) and isinstance(
                    ret.value.func, ast.Name
                ):
                    return name_class(ctx, owner[0], lib, ret.value.func.id)
    return None
