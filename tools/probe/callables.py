"""The record of any callable the probe is asked about: a def through its decorators, a class through its
constructor (tools/probe/constructors.py), an alias, or a ``functools.partial`` of either.

The record is what a caller's keyword meets: ``params``, plus ``exact`` (False when a layer cannot be read
and what the call accepts is unknown), ``open_keywords`` (it takes any keyword though no ``**kwargs`` shows,
e.g. a pydantic model that ignores extras) and ``layers`` (what it went through, for the evidence).

Part of the source probe (see tools/source_probe.py): stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ast
from typing import Any

from tools.probe.constructors import constructor_record
from tools.probe.decorators import apply_decorators
from tools.probe.modules import Found, ProbeError, parse
from tools.probe.resolve import dotted, lookup, method_kind
from tools.probe.signatures import function_signature

PARTIALS = ("partial", "partialmethod")


def def_record(found: Found) -> dict[str, Any]:
    node = found.node
    is_method = len(found.qual) > 1 and method_kind(node) != "staticmethod"
    sig = function_signature(found, is_method)
    sig.update(exact=True, open_keywords=False, layers=[], unknown=None)
    sig = apply_decorators(found, node.decorator_list, sig, is_method)
    if sig["exact"] and signature_set_by_hand(found) and any(
            p["kind"] in ("var_positional", "var_keyword") for p in sig["params"]):
        sig.update(exact=False, unknown="its __signature__ is set by hand over *args/**kwargs")
        sig["layers"].append(sig["unknown"])
    return sig


def signature_set_by_hand(found: Found) -> bool:
    """``name.__signature__ = ...`` beside the def: inspect shows that, the code may enforce it."""
    for stmt in ast.walk(parse(found.path)[1]):
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Attribute) and target.attr == "__signature__" and \
                        dotted(target.value) == found.qual[-1:]:
                    return True
    return False


def partial_record(found: Found, call: ast.Call) -> dict[str, Any]:
    """``partial(f, *bound, **bound_kw)``: the bound positionals are gone, bound keywords get defaults."""
    if not call.args or any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords):
        sig: dict[str, Any] = {"params": [], "returns_src": None, "path": found.path, "lineno": call.lineno,
               "derived_from": "partial", "exact": False, "open_keywords": False, "unknown": None, "layers": []}
        sig["unknown"] = "a partial over *args/**kwargs"
        return sig
    names = dotted(call.args[0])
    if not names:
        raise ProbeError(f"{found.path}:{call.lineno}: a partial of an expression")
    try:  # a partialmethod names a member of the same class
        target = lookup(found.module, [*found.qual[:-1], *names]) if len(found.qual) > 1 else None
    except ProbeError:
        target = None
    inner = signature_of(target or lookup(found.module, names))
    drop = len(call.args) - 1
    bound = {k.arg or "" for k in call.keywords}
    params, skipped = [], 0
    for p in inner["params"]:
        if p["kind"] in ("positional_only", "positional_or_keyword") and skipped < drop:
            skipped += 1
            continue
        params.append({**p, "kind": "keyword_only", "has_default": True} if p["name"] in bound else p)
    layers = [*inner.get("layers", []), "partial binding {} positional(s) and {}".format(
        drop, ", ".join(sorted(bound)) or "no keyword")]
    return {**inner, "params": params, "layers": layers, "derived_from": f"partial of {inner['derived_from']}"}


def signature_of(found: Found) -> dict[str, Any]:
    node = found.node
    if isinstance(node, ast.ClassDef):
        return constructor_record(found)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return def_record(found)
    value = getattr(node, "value", None)
    if isinstance(value, (ast.Name, ast.Attribute)):  # an alias: `Foo = other.Bar`
        return signature_of(lookup(found.module, dotted(value)))
    if isinstance(value, ast.Call) and dotted(value.func)[-1:] and dotted(value.func)[-1] in PARTIALS:
        return partial_record(found, value)
    raise ProbeError(
        "{} in {} is not a function or class".format(".".join(found.qual) or found.module, found.path)
    )
