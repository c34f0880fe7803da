"""What the OUTERMOST callable accepts when a def is decorated: each decorator, innermost first, is read from
source and kept only when it provably leaves the call's keywords alone; anything else makes the record unknown.

A decorator's result is read, never guessed: it returns what it was given (a registry), or a nested wrapper.
A wrapper ``(*args, **kwargs)`` that does nothing with them but pass them, whole, to the wrapped callable
accepts what that callable accepts (plus its own keyword-only parameters, which it consumes); a wrapper with
no ``*args``/``**kwargs`` accepts exactly its own parameters; any other wrapper (one that pops, reads or
swallows its keywords) is unknown: ``runtime`` introspection would follow ``__wrapped__`` to the inner def and
show a signature the call does not have.

Part of the source probe (see tools/source_probe.py): stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ast
from typing import Any

from tools.probe.modules import Found, ProbeError, parse
from tools.probe.resolve import binding, dotted, imported_from, lookup
from tools.probe.signatures import function_signature

# The language's and stdlib's own decorators whose result binds exactly the arguments of what they decorate.
TRANSPARENT = {
    "builtins": ("staticmethod", "classmethod", "property", "setter", "getter", "deleter"),
    "abc": ("abstractmethod", "abstractclassmethod", "abstractstaticmethod", "abstractproperty"),
    "functools": ("cache", "lru_cache", "cached_property", "singledispatch", "singledispatchmethod",
                  "total_ordering"),
    "typing": ("overload", "final", "override", "no_type_check", "runtime_checkable"),
    "typing_extensions": ("overload", "final", "override", "no_type_check", "runtime_checkable"),
    "contextlib": ("contextmanager", "asynccontextmanager"),
}
BROAD_ERRORS = ("TypeError", "Exception", "BaseException")
HARMLESS_CALLS = ("isinstance", "issubclass", "getattr", "hasattr", "id", "str", "repr", "type", "callable")
STORE_METHODS = ("append", "add", "setdefault", "insert")


class Unknown(Exception):
    """A layer whose effect on the call's keywords cannot be proven from source."""


def stdlib_transparent(owner: Found, deco: Any) -> bool:
    names = dotted(deco.func if isinstance(deco, ast.Call) else deco)
    if not names:
        return False
    if names[-1] in ("setter", "getter", "deleter") and len(names) == 2:
        return True  # @prop.setter
    source = names[0] if len(names) > 1 else imported_from(owner, names[0]) or "builtins"
    if len(names) == 1 and source == "builtins" and not is_local(owner, names[0]):
        return names[0] in TRANSPARENT["builtins"]
    return names[-1] in TRANSPARENT.get(source, ())


def is_local(owner: Found, name: str) -> bool:
    return binding(parse(owner.path)[1].body, name) is not None


def resolve_decorator(owner: Found, deco: Any) -> tuple[Found, bool]:
    """The def a decorator expression names, and whether it was called (``@factory(args)``)."""
    called = isinstance(deco, ast.Call)
    names = dotted(deco.func if called else deco)
    if not names:
        raise Unknown("a decorator that is not a plain name")
    try:
        found = lookup(owner.module, names)
    except (ProbeError, OSError) as exc:
        raise Unknown("decorator {} cannot be read ({})".format(".".join(names), exc)) from exc
    if not isinstance(found.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise Unknown("decorator {} is not a def ({}:{})".format(".".join(names), found.path, found.node.lineno))
    return found, called


def nested_def(fn: Any, name: str) -> Any:
    return next((s for s in fn.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name),
                None)


def returned_names(fn: Any) -> list[Any]:
    """The values of ``fn``'s own return statements (not those of defs nested in it)."""
    out: list[Any] = []

    def visit(node: Any) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Return):
                out.append(child.value)
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child)

    visit(fn)
    return out


def decorator_proper(found: Found, called: bool) -> Any:
    """The def that receives the decorated callable: the factory's returned nested def when called."""
    fn = found.node
    if not called:
        return fn
    values = returned_names(fn)
    if values and all(isinstance(v, ast.Name) for v in values) and len({v.id for v in values}) == 1:
        inner = nested_def(fn, values[0].id)
        if inner is not None:
            return inner
    raise Unknown(f"decorator factory {fn.name} ({found.path}:{fn.lineno}) does not return one nested def")


def uses(fn: Any, name: str) -> list[tuple[Any, Any]]:
    """(node, parent) for each ``Name`` ``name`` in ``fn``'s body."""
    found: list[tuple[Any, Any]] = []
    for parent in ast.walk(fn):
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, ast.Name) and child.id == name:
                found.append((child, parent))
    return found


def untouched_return(deco: Any, param: str) -> bool:
    """Every return gives back ``param`` itself, and nothing writes to it (a registry, not a rewrite)."""
    values = returned_names(deco)
    if not values or not all(isinstance(v, ast.Name) and v.id == param for v in values):
        return False
    for node, parent in uses(deco, param):
        if isinstance(parent, (ast.Return, ast.Assign)) and node is getattr(parent, "value", None):
            continue  # returned, or stored: `REGISTRY[key] = fn`
        if isinstance(parent, ast.Attribute) and isinstance(parent.ctx, ast.Load):
            continue  # fn.__name__
        if isinstance(parent, ast.Call) and node in parent.args:
            func = dotted(parent.func)
            if func[-1:] and ((func[-1] in STORE_METHODS and len(func) > 1) or (func == [func[-1]] and
                              func[-1] in HARMLESS_CALLS)):
                continue
        if isinstance(parent, (ast.Compare, ast.FormattedValue, ast.JoinedStr, ast.Tuple, ast.BoolOp)):
            continue
        return False
    return True


def swallows(wrapper: Any) -> bool:
    """An ``except`` that could catch the wrapped call's TypeError and not raise: the call may not fail."""
    for node in ast.walk(wrapper):
        if isinstance(node, ast.ExceptHandler):
            caught = [] if node.type is None else (node.type.elts if isinstance(node.type, ast.Tuple) else
                                                   [node.type])
            broad = node.type is None or any(dotted(c)[-1:] and dotted(c)[-1] in BROAD_ERRORS for c in caught)
            if broad and not any(isinstance(n, ast.Raise) for n in ast.walk(node)):
                return True
    return False


CONDITIONAL = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.BoolOp, ast.comprehension, ast.Lambda,
               ast.FunctionDef, ast.AsyncFunctionDef, ast.ExceptHandler, ast.ClassDef)


def always_reached(wrapper: Any, call: Any) -> bool:
    """``call`` runs on every path: under no branch or loop, and no ``return`` comes before it."""
    parents = {id(c): p for p in ast.walk(wrapper) for c in ast.iter_child_nodes(p)}
    node = parents.get(id(call))
    while node is not None and node is not wrapper:
        if isinstance(node, CONDITIONAL):
            return False
        node = parents.get(id(node))
    returns = [n for n in ast.walk(wrapper) if isinstance(n, ast.Return)]
    return all((r.lineno, r.col_offset) >= (call.lineno, 0) for r in returns)


def forwarding_calls(wrapper: Any, target: str) -> list[Any]:
    return [n for n in ast.walk(wrapper) if isinstance(n, ast.Call) and dotted(n.func) == [target]]


def wrapper_layer(inner: dict[str, Any], at: Found, wrapper: Any, target: str, is_method: bool) -> dict[str, Any]:
    """What calling ``wrapper`` (defined in ``at``'s file) accepts, given that ``target`` accepts ``inner``."""
    a, where = wrapper.args, f"{at.path}:{wrapper.lineno}"
    here = Found(at.module, at.path, wrapper, [wrapper.name])
    if wrapper.decorator_list and not all(dotted(d.func if isinstance(d, ast.Call) else d)[-1:] == ["wraps"]
                                          for d in wrapper.decorator_list):
        raise Unknown(f"wrapper {wrapper.name} ({where}) is itself decorated")
    if a.vararg is None and a.kwarg is None:  # binds its own parameters, whatever it does next
        own = function_signature(here, False, f"wrapper {wrapper.name}")["params"]
        return {**inner, "params": own[1:] if is_method and own else own}
    leading = [p.arg for p in [*a.posonlyargs, *a.args]]
    if a.defaults:
        raise Unknown(f"wrapper {wrapper.name} ({where}) has defaults for its leading parameters")
    calls = forwarding_calls(wrapper, target)
    star, kw = (a.vararg.arg if a.vararg else None), (a.kwarg.arg if a.kwarg else None)
    expected_args = [*leading, "*" + star] if star else leading
    for call in calls:
        args = [("*" + n.value.id if isinstance(n, ast.Starred) and isinstance(n.value, ast.Name) else
                 n.id if isinstance(n, ast.Name) else "?") for n in call.args]
        named = [k for k in call.keywords if k.arg is not None]
        spread = [k for k in call.keywords if k.arg is None]
        if args != expected_args or [getattr(k.value, "id", "?") for k in spread] != ([kw] if kw else []):
            raise Unknown(f"wrapper {wrapper.name} ({where}) does not pass its *args/**kwargs on unchanged")
        for k in named:
            if not (isinstance(k.value, ast.Name) and k.value.id == k.arg):
                raise Unknown(f"wrapper {wrapper.name} ({where}) adds keyword {k.arg}= of its own")
    for name in (star, kw):
        if name and len(uses(wrapper, name)) != len(calls):
            raise Unknown(f"wrapper {wrapper.name} ({where}) reads or changes {name} before passing it on")
    if not any(always_reached(wrapper, call) for call in calls):
        raise Unknown(f"wrapper {wrapper.name} ({where}) may return without calling {target}")
    if swallows(wrapper):
        raise Unknown(f"wrapper {wrapper.name} ({where}) catches the call's errors without raising")
    own = function_signature(here, False)["params"]
    own_leading = own[1 if is_method else 0 : len(leading)]
    consumed = [p for p in own if p["kind"] == "keyword_only"]  # taken by the wrapper itself (or passed on)
    positional = [p for p in inner["params"] if p["kind"] in ("positional_only", "positional_or_keyword")]
    params = [p for p in inner["params"] if p not in positional[: len(own_leading)]]
    if a.kwarg is None:  # keywords cannot get through: only the wrapper's own names bind
        params = [{**p, "kind": "positional_only"} if p["kind"] == "positional_or_keyword" else p
                  for p in params if p["kind"] not in ("keyword_only", "var_keyword")]
    mine = {p["name"] for p in own_leading + consumed}
    return {**inner, "params": own_leading + [p for p in params if p["name"] not in mine] + consumed}


def apply_decorators(owner: Found, decos: list[Any], sig: dict[str, Any], is_method: bool) -> dict[str, Any]:
    """``sig`` (of the bare def or class) as the decorated name exposes it; ``exact`` False when unproven."""
    for deco in reversed(decos):
        label = ".".join(dotted(deco.func if isinstance(deco, ast.Call) else deco)) or "<expression>"
        if stdlib_transparent(owner, deco):
            continue
        try:
            found, called = resolve_decorator(owner, deco)
            proper = decorator_proper(found, called)
            params = [*proper.args.posonlyargs, *proper.args.args]
            if len(found.qual) > 1 and not called and params and params[0].arg in ("self", "cls"):
                params = params[1:]  # a classmethod used as a decorator: `@Registry.register`
            if not params:
                raise Unknown(f"decorator {label} takes no argument")
            where = f"{found.path}:{proper.lineno}"
            if untouched_return(proper, params[0].arg):
                sig["layers"].append(f"@{label} ({where}) returns what it decorates")
                continue
            values = returned_names(proper)
            wrapper = nested_def(proper, values[0].id) if values and isinstance(values[0], ast.Name) else None
            if wrapper is None or not all(isinstance(v, ast.Name) and v.id == wrapper.name for v in values):
                raise Unknown(f"decorator {label} ({where}) returns something other than a nested wrapper")
            sig = wrapper_layer(sig, found, wrapper, params[0].arg, is_method)
            sig["layers"].append(f"@{label} ({where}): wrapper {wrapper.name} passes the call on")
        except Unknown as exc:
            sig["exact"] = False
            sig["unknown"] = f"@{label}: {exc}"
            sig["layers"].append(sig["unknown"])
            return sig
    return sig
