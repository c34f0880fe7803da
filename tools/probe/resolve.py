"""From a name to the node that defines it: bindings of a block, imports and re-exports followed across
modules, class members through the bases (``mro``), and how a method is decorated.

Part of the source probe (see tools/source_probe.py): stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ast
import sys
from typing import Any

from tools.probe.modules import Found, ProbeError, find_spec, package_of, parse, source_file


def bindings(body: list[Any], in_handler: bool = False) -> Any:
    """(name, node, in_except_handler) for each name a block binds, nested if/try/with blocks included."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield stmt.name, stmt, in_handler
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for elt in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(elt, ast.Name):
                        yield elt.id, stmt, in_handler
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            yield stmt.target.id, stmt, in_handler
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                yield (alias.asname or alias.name).split(".")[0], (stmt, alias), in_handler
        elif isinstance(stmt, ast.If):
            yield from bindings(stmt.body + stmt.orelse, in_handler)
        elif isinstance(stmt, ast.Try):
            yield from bindings(stmt.body + stmt.orelse + stmt.finalbody, in_handler)
            for handler in stmt.handlers:
                yield from bindings(handler.body, True)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from bindings(stmt.body, in_handler)


def binding(body: list[Any], name: str) -> Any:
    """The binding Python would most likely use: the last one, preferring those outside except-handlers."""
    found = [(node, handler) for n, node, handler in bindings(body) if n == name]
    preferred = [node for node, handler in found if not handler] or [node for node, _ in found]
    return preferred[-1] if preferred else None


def absolute(module: str, path: str, stmt: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in ``module`` (whose file is ``path``) reads from."""
    if not stmt.level:
        return stmt.module or ""
    pkg = package_of(module, path).split(".")
    return ".".join(pkg[: len(pkg) - (stmt.level - 1)] + ([stmt.module] if stmt.module else []))


def lookup(module: str, names: list[str], depth: int = 0) -> Found:
    """Resolve ``module:names`` to where it is defined, following re-exports and submodules."""
    path = source_file(module)
    if not names:
        return Found(module, path, None, [])
    if depth > 12:
        raise ProbeError("import cycle while resolving {}:{}".format(module, ".".join(names)))
    node = binding(parse(path)[1].body, names[0])
    if isinstance(node, tuple):  # an import: follow it to the defining module
        stmt, alias = node
        if isinstance(stmt, ast.Import):
            if alias.asname:
                return lookup(alias.name, names[1:], depth + 1)
            return lookup(names[0], names[1:], depth + 1)
        base = absolute(module, path, stmt)
        if find_spec(base + "." + alias.name) is not None:  # `from pkg import submodule`
            return lookup(base + "." + alias.name, names[1:], depth + 1)
        return lookup(base, [alias.name, *names[1:]], depth + 1)
    if node is None:
        if path.endswith("__init__.py") and find_spec(module + "." + names[0]) is not None:
            return lookup(module + "." + names[0], names[1:], depth + 1)
        for stmt in star_imports(parse(path)[1].body):  # `from .x import *` (torch.nn; pydantic if TYPE_CHECKING)
            try:
                return lookup(absolute(module, path, stmt), names, depth + 1)
            except ProbeError:
                continue
        raise ProbeError(f"{names[0]} is not defined in {module} ({path})")
    found = Found(module, path, node, [names[0]])
    for name in names[1:]:
        found = member(found, name)
    return found


def star_imports(body: list[Any]) -> Any:
    """``from x import *`` statements of a block, those under ``if``/``try`` included."""
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom) and [a.name for a in stmt.names] == ["*"]:
            yield stmt
        elif isinstance(stmt, ast.If):
            yield from star_imports(stmt.body + stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from star_imports(stmt.body + stmt.orelse + stmt.finalbody)


def member(owner: Found, name: str) -> Found:
    if not isinstance(owner.node, ast.ClassDef):
        raise ProbeError(
            "{} in {} is not a class; it has no member {}".format(".".join(owner.qual), owner.path, name)
        )
    for restrict in (top_package(owner), None):  # the package's own bases first: cheaper, and likelier
        for klass in mro(owner, restrict):
            node = binding(klass.node.body, name)
            if node is not None and not isinstance(node, tuple):
                return Found(klass.module, klass.path, node, [*klass.qual, name])
    raise ProbeError(f"class {owner.qual[-1]} ({owner.path}) has no member {name}")


def resolve(target: str) -> Found:
    """``pkg.mod:Class.attr`` or ``pkg.mod.Class.attr`` (the longest importable prefix is the module)."""
    if ":" in target:
        module, _, rest = target.partition(":")
        return lookup(module, rest.split(".") if rest else [])
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        if find_spec(".".join(parts[:i])) is not None:
            return lookup(".".join(parts[:i]), parts[i:])
    raise ProbeError(f"no module for {target!r} on the sys.path of {sys.executable}")


def dotted(node: Any) -> list[str]:
    if isinstance(node, ast.Subscript):  # Generic[T], BaseModel[...]
        return dotted(node.value)
    if isinstance(node, ast.Attribute):
        return [*dotted(node.value), node.attr]
    return [node.id] if isinstance(node, ast.Name) else []


def imported_from(klass: Found, name: str) -> str | None:
    """The top package an absolute import of ``name`` comes from; None if local or relative."""
    node = binding(parse(klass.path)[1].body, name)
    if isinstance(node, tuple):
        stmt, alias = node
        source = alias.name if isinstance(stmt, ast.Import) else (stmt.module if not stmt.level else None)
        return source.split(".")[0] if source else None
    return None


def mro(found: Found, restrict: str | None) -> list[Found]:
    """The class then its bases, depth first, that resolve to source (in ``restrict``'s package, if given)."""
    order: list[Found] = []
    seen: set[tuple[str, int]] = set()

    def visit(klass: Found) -> None:
        if klass.key() in seen or len(order) > 40:
            return
        seen.add(klass.key())
        order.append(klass)
        for base in klass.node.bases:
            names = dotted(base)
            if not names or (restrict and imported_from(klass, names[0]) not in (None, restrict)):
                continue  # a base from another package (torch, pydantic): not worth parsing
            try:
                resolved = lookup(klass.module, names)
            except (ProbeError, OSError):
                continue
            top = resolved.module.split(".")[0]
            if isinstance(resolved.node, ast.ClassDef) and restrict in (None, top):
                visit(resolved)

    visit(found)
    return order


def decorators(node: Any) -> list[str]:
    return [".".join(dotted(d.func if isinstance(d, ast.Call) else d)) for d in node.decorator_list]


def method_kind(fn: Any) -> str:
    for name in decorators(fn):
        last = name.rpartition(".")[2]
        if last in ("staticmethod", "classmethod"):
            return last
        if last in ("property", "cached_property", "setter", "getter", "deleter"):
            return "property"
    return "method"



def top_package(found: Found) -> str:
    return found.module.split(".")[0]

