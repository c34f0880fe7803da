"""The library refuses to read a state its own driver sets first, and the refusal names the step that sets it.

vLLM 0.29 added a step to its engine core's start, ``resolve_kv_cache_layout`` before the KV cache config is
made, and ``CacheConfig.get_resolved_kv_cache_layout`` raises "KV cache layout has not been resolved yet; it is
resolved once by the engine core (resolve_kv_cache_layout) unless explicitly set by the user". speculators 0.3.0's
generator makes that config itself from the engine's parts and never took the step. The repair is the library's
own: the statement that calls the named function, where the library calls it, with the statements right after it
that use its result, placed before our call that reached the refusal, in our names —
- the library function's parameters: what our call passes under the same keyword, else our own name for it;
- the library's ``self.<x>``: the one attribute of ours whose class has every method the steps call on it;
- the library's locals: what it assigned them (so the step asks what the library asked);
- its module's names: imported as it imports them.
Anything else the steps read, or a name they bind that ours already use: nothing is proposed. The run decides.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re

from agent.repair.context import (
    candidate,
    evidence_line,
    fixable_frames,
    library_call_node,
    library_call_sites,
    library_refusal,
    one_line,
    read_source,
    resolve_callee,
)
from agent.repair.derived_values import Function, import_source, inline, is_self, library_module_of
from agent.repair.edits import (
    Source,
    free_names,
    insert_before_statement,
    local_names,
    param_names,
    statement_holding,
)
from agent.repair.types import Candidate, Fault, RepairContext
from tools import pysyntax
from tools import source as src_tools
from tools.errors import MedicError

SNAKE_NAME = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")  # a function's name, as a message quotes one


def named_precondition(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    refusal = library_refusal(ctx, fault)
    ours = fixable_frames(ctx, fault)
    if refusal is None or not ours:
        return []
    frame = ours[0]
    src = read_source(ctx, frame.file)
    stmt = src.statement_at(frame.line) if src else None
    func = src.enclosing_function(stmt.lineno) if src and stmt else None
    if src is None or stmt is None or func is None:
        return []
    in_traceback = {f.func for f in fault.frames}
    for name in dict.fromkeys(SNAKE_NAME.findall(fault.message)):
        if name in in_traceback:
            continue  # the refusal's own path, not a step it names
        for site in library_call_sites(ctx, name):
            found = library_call_node(ctx, site.path, site.lineno, name)
            taken = library_steps(*found) if found else None
            if found is None or taken is None:
                continue
            lib, (lib_func, steps) = found[0], taken
            lines = in_our_names(ctx, lib, lib_func, steps, src, func, stmt)
            if lines is None:
                continue
            text = insert_before_statement(src, stmt.lineno, lines)
            why = (f"the installed library refuses before {name}() has run ({refusal.where}), and its own "
                   f"{lib_func.name} calls it first: the same step, in our names, before our call")
            evidence = [refusal.evidence,
                        *(evidence_line(site.path, s.lineno, one_line(lib.segment(s))) for s in steps),
                        evidence_line(frame.file, frame.line, src.line(frame.line))]
            return [candidate(ctx, {frame.file: text}, origin="derived:named_precondition", rationale=why,
                              evidence=evidence)]
    return []


def library_steps(lib: Source, call: ast.Call) -> tuple[Function, list[ast.stmt]] | None:
    """The library function making ``call``, and its steps: the statement making it (``x = f(...)`` or
    ``f(...)``), then the calls right after it that use ``x``, with the function's locals replaced by what it
    assigned them."""
    func = lib.enclosing_function(call.lineno)
    stmt = statement_holding(func, call.lineno) if func else None
    if func is None or stmt is None or not (isinstance(stmt, ast.Assign | ast.Expr) and stmt.value is call):
        return None
    steps: list[ast.stmt] = [stmt]
    if isinstance(stmt, ast.Assign):
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            return None
        result = stmt.targets[0].id
        block = next(b for b in blocks(func) if stmt in b)
        for after in block[block.index(stmt) + 1 :]:
            if not (isinstance(after, ast.Expr) and result in free_names(after)):
                break
            steps.append(after)
    keep = {*param_names(func), *assigned(steps)}
    return func, [inlined(func, s, stmt.lineno, keep=keep | bound_inside(s)) for s in steps]


def blocks(node: ast.AST) -> list[list[ast.stmt]]:
    return [body for n in ast.walk(node) for field in ("body", "orelse", "finalbody")
            if isinstance(body := getattr(n, field, None), list) and body and isinstance(body[0], ast.stmt)]


def assigned(steps: list[ast.stmt]) -> set[str]:
    """The names the steps leave bound in the function that runs them (a comprehension's variables do not leak)."""
    return {t.id for s in steps if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}


def bound_inside(stmt: ast.stmt) -> set[str]:
    """Names a statement binds itself (its target, a comprehension's variables): never the function's locals."""
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def inlined(func: Function, stmt: ast.stmt, lineno: int, *, keep: set[str]) -> ast.stmt:
    stmt = copy.deepcopy(stmt)
    stmt.value = inline(func, stmt.value, lineno, keep=keep)  # type: ignore[attr-defined]
    return stmt


def in_our_names(ctx: RepairContext, lib: Source, lib_func: Function, steps: list[ast.stmt], src: Source,
                 func: Function, at: ast.stmt) -> list[str] | None:
    """The steps as lines of our function (imports first), or None when one reads what we cannot give it."""
    params = set(param_names(lib_func)) - {"self"}
    module = ast.Module(body=list(steps), type_ignores=[])
    ours_read = local_names(func) | free_names(func)
    if assigned(steps) & ours_read:
        return None  # the step would overwrite a name of ours
    names: dict[str, str] = {}
    imports: list[str] = []
    call = getattr(at, "value", None)
    passed = {k.arg: src.segment(k.value) for k in call.keywords if k.arg} if isinstance(call, ast.Call) else {}
    here = library_module_of(ctx, lib.path)
    for name in sorted(free_names(module) - set(dir(builtins)) - {"self"}):
        if name in params:
            given = passed.get(name) or (name if name in local_names(func) else None) or our_attribute(src, func, name)
            if given is None:
                return None
            names[name] = given
            continue
        found = import_source(ctx, lib, name)
        if found is None and here and any(isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name
                                          for n in lib.tree.body):
            found = (here, name)
        if found is None:
            return None
        if src.imported_from(name) == found[0]:
            continue
        if name in ours_read:
            return None  # an import in our function would make our own use of the name a local's
        imports.append(f"from {found[0]} import {found[1]}" + (f" as {name}" if name != found[1] else ""))
    attributes = self_attributes(ctx, module, src, func)
    if attributes is None:
        return None
    mapped = [ast.unparse(OurNames(names, attributes).visit(copy.deepcopy(s))) for s in steps]
    return [*imports, *(line for text in mapped for line in text.splitlines())]


def our_attribute(src: Source, func: Function, name: str) -> str | None:
    """``self.<name>`` when our class sets it (the library's parameter, kept on our object under its own name)."""
    if "self" not in param_names(func) or not re.search(rf"\bself\.{name}\s*=", src.text):
        return None
    return f"self.{name}"


def self_attributes(ctx: RepairContext, module: ast.Module, src: Source, func: Function) -> dict[str, str] | None:
    """The library's ``self.<x>`` -> ours: each used only as the receiver of method calls, and matched by the one
    attribute our class sets to an object whose class has every one of those methods."""
    called: dict[str, set[str]] = {}
    receivers = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_self_attribute(node.func.value):
            called.setdefault(node.func.value.attr, set()).add(node.func.attr)  # type: ignore[attr-defined]
            receivers.add(id(node.func.value))
    selves = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "self"]
    attributes = [n for n in ast.walk(module) if is_self_attribute(n)]
    if len(selves) != len(attributes) or any(id(n) not in receivers for n in attributes):
        return None  # the library's object used otherwise than by calling its methods
    if called and "self" not in param_names(func):
        return None
    mapping: dict[str, str] = {}
    for attr, methods in called.items():
        fits = [ours for ours, cls in our_objects(src) if methods <= class_methods(ctx, src, cls)]
        if len(fits) != 1:
            return None
        mapping[attr] = f"self.{fits[0]}"
    return mapping


def is_self_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and is_self(node.value)


def our_objects(src: Source) -> list[tuple[str, str]]:
    """(attribute, class name) for each ``self.<attribute> = <Class>(...)`` in our file."""
    return list(dict.fromkeys(
        (n.targets[0].attr, n.value.func.id) for n in ast.walk(src.tree)  # type: ignore[attr-defined]
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and is_self_attribute(n.targets[0])
        and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)))


def class_methods(ctx: RepairContext, src: Source, cls: str) -> set[str]:
    target = resolve_callee(ctx, src, cls)
    if target is None:
        return set()
    try:
        return {m.name for m in src_tools.class_members(ctx.host, ctx.python, target, all_bases=True)}
    except MedicError:
        return set()


class OurNames(ast.NodeTransformer):
    def __init__(self, names: dict[str, str], attributes: dict[str, str]) -> None:
        self.names, self.attributes = names, attributes

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return pysyntax.parse_expression(self.names[node.id]) if node.id in self.names else node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if is_self_attribute(node) and node.attr in self.attributes:
            return pysyntax.parse_expression(self.attributes[node.attr])
        return self.generic_visit(node)
