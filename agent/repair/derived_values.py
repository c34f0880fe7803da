"""Where a value the library passes comes from, followed one step of indirection, read from its source with ast.

The library's own call site passes ``param=<expr>``; what we may copy from it, best first:
- ``<expr>`` is a local computed by ``name = value``: that value;
- ``<expr>`` is a local unpacked from a helper's return (``a, b = helper(...)``): the same unpacking, where our
  code can make that call (a module-level function we can import, or a method of an object we have); else what
  the helper itself returns at that position, its parameters bound to the arguments the library passes and its
  ``self.x`` to what the library's caller set ``self.x`` to (the config attribute it reads, say);
- otherwise ``<expr>`` itself.
Each option is in the library caller's names; ``derived_calls`` maps them onto ours and keeps the first that fits.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field

from agent.repair.context import evidence_line, read_source
from agent.repair.edits import Source, assignment_before, unpacking_before
from agent.repair.types import RepairContext
from tools import source as src_tools
from tools.errors import MedicError

Function = ast.FunctionDef | ast.AsyncFunctionDef
UNBOUND = "<unbound>"  # a helper parameter the library's call leaves to its default: never in our scope
INLINE_DEPTH = 4


@dataclass(frozen=True)
class Option:
    value: ast.expr
    setup: tuple[ast.stmt, ...] = ()  # statements to run before our call (library caller's names)
    imports: tuple[tuple[str, str, str], ...] = ()  # (module, name, as) the setup needs
    evidence: tuple[str, ...] = field(default=())

    @property
    def binds(self) -> set[str]:
        return {n.id for stmt in self.setup for n in ast.walk(stmt)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

    def needs(self) -> set[str]:
        """Names the option reads that neither its setup nor its imports provide."""
        loads = {n.id for node in (self.value, *self.setup) for n in ast.walk(node)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        return loads - self.binds - {alias for _, _, alias in self.imports}


def library_options(
    ctx: RepairContext, lib: Source, lib_func: Function | None, lib_call: ast.Call, expr: ast.expr
) -> Iterator[Option]:
    if isinstance(expr, ast.Name) and lib_func is not None:
        assigned = assignment_before(lib_func, expr.id, lib_call.lineno)
        unpacked = unpacking_before(lib_func, expr.id, lib_call.lineno)
        if assigned is not None and (unpacked is None or assigned.lineno > unpacked[0].lineno):
            yield Option(assigned.value, evidence=(evidence_line(lib.path, assigned.lineno, ast.unparse(assigned)),))
            return
        if unpacked is not None:
            yield from through_helper(ctx, lib, lib_func, *unpacked)
            return
    yield Option(expr)


def through_helper(ctx: RepairContext, lib: Source, lib_func: Function, assign: ast.Assign, index: int
                   ) -> Iterator[Option]:
    call = assign.value
    if not isinstance(call, ast.Call):
        return
    seen = [evidence_line(lib.path, assign.lineno, lib.segment(assign))]
    imports = importable(ctx, lib, call)
    if imports is not None or (isinstance(call.func, ast.Attribute) and not is_self(call.func.value)):
        yield Option(ast.Name(assign.targets[0].elts[index].id, ast.Load()),  # type: ignore[attr-defined]
                     setup=(assign,), imports=imports or (), evidence=tuple(seen))
    found = helper_definition(ctx, lib, call)
    if found is None:
        return
    helper_src, helper, bound = found
    args = bind_arguments(helper, call, skip_first=bound)
    done: set[str] = set()
    for ret in returns(helper):
        if not (isinstance(ret.value, ast.Tuple | ast.List) and len(ret.value.elts) > index
                and not any(isinstance(e, ast.Starred) for e in ret.value.elts)):
            continue
        value = inline(helper, ret.value.elts[index], ret.lineno, keep=set(args))
        value = Substitute(args).visit(value)
        value = SelfAttributes(lib_func, assign.lineno).visit(value)
        text = ast.unparse(value)
        if text in done:
            continue
        done.add(text)
        yield Option(value, evidence=(*seen, evidence_line(helper_src.path, helper.lineno, f"def {helper.name}(...)"),
                                      evidence_line(helper_src.path, ret.lineno, helper_src.line(ret.lineno))))


# -- the helper: can we call it, and what does it return ----------------------------------------------------
def is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def library_module_of(ctx: RepairContext, path: str) -> str | None:
    for package in ctx.library_packages:
        at = path.rfind(f"/{package}/")
        if at >= 0 and path.endswith(".py"):
            return path[at + 1 : -3].replace("/", ".").removesuffix(".__init__")
    return None


def import_source(ctx: RepairContext, lib: Source, name: str) -> tuple[str, str] | None:
    """(module, original name) a top-level import of ``lib`` brings ``name`` from (relative ones resolved)."""
    for node in lib.tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            module = node.module or ""
            if node.level:
                here = library_module_of(ctx, lib.path)
                if here is None:
                    return None
                parts = here.split(".") if lib.path.endswith("/__init__.py") else here.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                module = ".".join([*parts, *([module] if module else [])])
            return module, alias.name
    return None


def importable(ctx: RepairContext, lib: Source, call: ast.Call) -> tuple[tuple[str, str, str], ...] | None:
    """The import that lets our code call ``call``'s function as the library does; None if it is not a plain
    function of a module (a method, a local, a builtin)."""
    if not isinstance(call.func, ast.Name):
        return None
    name = call.func.id
    found = import_source(ctx, lib, name)
    if found is not None:
        return ((found[0], found[1], name),)
    if any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name for n in lib.tree.body):
        module = library_module_of(ctx, lib.path)
        return ((module, name, name),) if module else None
    return None


def helper_definition(ctx: RepairContext, lib: Source, call: ast.Call) -> tuple[Source, Function, bool] | None:
    """The helper's def: a function of this module or the one it is imported from, or a method of the class
    the library's call is made in (``self.helper(...)``); the flag says ``self`` is its first parameter."""
    if isinstance(call.func, ast.Attribute) and is_self(call.func.value):
        owner = lib.enclosing_class(call.lineno)
        method = next((n for n in owner.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                       and n.name == call.func.attr), None) if owner else None
        return (lib, method, True) if method else None
    if not isinstance(call.func, ast.Name):
        return None
    name = call.func.id
    here = next((n for n in lib.tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name),
                None)
    if here is not None:
        return lib, here, False
    found = import_source(ctx, lib, name)
    if found is None:
        return None
    try:
        symbol = src_tools.find_symbol(ctx.host, ctx.python, f"{found[0]}:{found[1]}")
    except MedicError:
        return None
    other = read_source(ctx, symbol.path)
    helper = next((n for n in other.tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                   and n.name == found[1]), None) if other else None
    return (other, helper, False) if other and helper else None


def bind_arguments(helper: Function, call: ast.Call, *, skip_first: bool) -> dict[str, ast.expr]:
    """Each parameter of ``helper`` -> what ``call`` passes for it (its default if it passes nothing)."""
    params = [*helper.args.posonlyargs, *helper.args.args][1 if skip_first else 0 :]
    defaults = dict(zip([p.arg for p in params][len(params) - len(helper.args.defaults):], helper.args.defaults,
                        strict=False))
    defaults.update({p.arg: d for p, d in zip(helper.args.kwonlyargs, helper.args.kw_defaults, strict=False) if d})
    bound: dict[str, ast.expr] = {p.arg: defaults.get(p.arg, ast.Name(UNBOUND, ast.Load()))
                                  for p in [*params, *helper.args.kwonlyargs]}
    for param, arg in zip(params, call.args, strict=False):
        bound[param.arg] = arg
    bound.update({k.arg: k.value for k in call.keywords if k.arg in bound})
    return bound


def returns(func: Function) -> Iterator[ast.Return]:
    """The function's own ``return`` statements (not those of functions nested in it)."""
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.Return):
            yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def inline(func: Function, expr: ast.expr, lineno: int, *, keep: set[str], depth: int = INLINE_DEPTH) -> ast.expr:
    """``expr`` with the function's locals replaced by what they were last assigned before ``lineno``."""

    class Inline(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in keep or depth <= 0 or not isinstance(node.ctx, ast.Load):
                return node
            assigned = assignment_before(func, node.id, lineno)
            if assigned is None:
                return node
            return inline(func, copy.deepcopy(assigned.value), assigned.lineno, keep=keep, depth=depth - 1)

    return Inline().visit(copy.deepcopy(expr))


class Substitute(ast.NodeTransformer):
    """Names -> expressions (a helper's parameters -> the arguments of the library's call)."""

    def __init__(self, values: dict[str, ast.expr]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.values[node.id]) if node.id in self.values else node


class SelfAttributes(ast.NodeTransformer):
    """``self.x`` -> what the library's calling function assigned to ``self.x`` before ``lineno``."""

    def __init__(self, func: Function, lineno: int) -> None:
        self.assigned: dict[str, ast.expr] = {}
        for node in sorted((n for n in ast.walk(func) if isinstance(n, ast.Assign) and n.lineno < lineno),
                           key=lambda n: n.lineno):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and is_self(target.value):
                    self.assigned[target.attr] = node.value

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if is_self(node.value) and node.attr in self.assigned and isinstance(node.ctx, ast.Load):
            return copy.deepcopy(self.assigned[node.attr])
        return self.generic_visit(node)
