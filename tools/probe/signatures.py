"""Signatures as a caller sees them: a function's parameters, or a class's ``__init__``, written or
generated (dataclass, pydantic ``BaseModel``, msgspec ``Struct``, ``NamedTuple``).

Part of the source probe (see tools/source_probe.py): stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ast
from typing import Any

from tools.probe.modules import Found, ProbeError, parse, snippet
from tools.probe.resolve import binding, dotted, imported_from, lookup, mro, top_package

RECORD_BASES = ("BaseModel", "Struct", "NamedTuple")


def param(text: str, arg: Any, kind: str, default: Any) -> dict[str, Any]:
    return {
        "name": arg.arg,
        "kind": kind,
        "has_default": default is not None,
        "default_src": snippet(text, default) if default is not None else None,
        "annotation_src": snippet(text, arg.annotation) if arg.annotation is not None else None,
    }


def function_signature(found: Found, drop_first: bool, derived_from: str = "def") -> dict[str, Any]:
    """Parameters as a caller sees them: ``self``/``cls`` is dropped for methods (``drop_first``)."""
    fn, text, a = found.node, found.text, found.node.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [
        param(text, arg, "positional_only" if i < len(a.posonlyargs) else "positional_or_keyword", d)
        for i, (arg, d) in enumerate(zip(positional, defaults))  # noqa: B905 (the probe runs on 3.8+)
    ]
    if drop_first and params:
        params.pop(0)
    if a.vararg:
        params.append(param(text, a.vararg, "var_positional", None))
    params += [param(text, arg, "keyword_only", d) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]  # noqa: B905
    if a.kwarg:
        params.append(param(text, a.kwarg, "var_keyword", None))
    returns = snippet(text, fn.returns) if fn.returns is not None else None
    return {
        "params": params,
        "returns_src": returns,
        "path": found.path,
        "lineno": fn.lineno,
        "derived_from": derived_from,
    }


def keyword_true(keywords: list[Any], name: str) -> bool:
    return any(
        k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True for k in keywords
    )


def dataclass_decorator(klass: Found) -> Any:
    """``@dataclass`` itself, or a decorator of the same package that calls it (vLLM's ``@config``)."""
    for deco in klass.node.decorator_list:
        names = dotted(deco.func if isinstance(deco, ast.Call) else deco)
        if names[-1:] == ["dataclass"] or original_name(klass, names) == "dataclass" or (
                names and wraps_dataclass(klass, names)):
            return deco
    return None


def original_name(klass: Found, names: list[str]) -> str | None:
    """``dataclass`` for ``from pydantic.dataclasses import dataclass as pydantic_dataclass``."""
    node = binding(parse(klass.path)[1].body, names[0]) if len(names) == 1 else None
    return node[1].name.rpartition(".")[2] if isinstance(node, tuple) else None


def wraps_dataclass(klass: Found, names: list[str]) -> bool:
    if imported_from(klass, names[0]) not in (None, top_package(klass)):
        return False
    try:
        wrapper = lookup(klass.module, names)
    except (ProbeError, OSError):
        return False
    if not isinstance(wrapper.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    calls = (n for n in ast.walk(wrapper.node) if isinstance(n, ast.Call))
    return any(dotted(call.func)[-1:] == ["dataclass"] for call in calls)


def record_flavor(chain: list[Found]) -> str | None:
    """How a class without ``__init__`` gets one: dataclass, BaseModel, Struct, NamedTuple, or not at all."""
    if dataclass_decorator(chain[0]) is not None:
        return "dataclass"
    for klass in chain:
        for base in klass.node.bases:
            if dotted(base)[-1:] and dotted(base)[-1] in RECORD_BASES:
                return dotted(base)[-1]
    return None


def field_default(text: str, value: Any) -> tuple[bool, str | None, bool]:
    """(has_default, default_src, in_init) of one annotated class attribute."""
    if value is None:
        return False, None, True
    if isinstance(value, ast.Call) and dotted(value.func)[-1:] in (["field"], ["Field"]):
        keywords = {k.arg: k.value for k in value.keywords if k.arg}
        init = keywords.get("init")
        if isinstance(init, ast.Constant) and init.value is False:
            return False, None, False
        for key in ("default_factory", "factory"):
            if key in keywords:
                return True, f"<factory {snippet(text, keywords[key])}>", True
        default = keywords.get("default")
        if (
            default is None
            and value.args
            and not (isinstance(value.args[0], ast.Constant) and value.args[0].value is Ellipsis)
        ):
            default = value.args[0]  # pydantic Field(default, ...)
        return (True, snippet(text, default), True) if default is not None else (False, None, True)
    return True, snippet(text, value), True


def record_params(chain: list[Found], flavor: str) -> list[dict[str, Any]]:
    """Fields as keyword params, base classes first, a redefined field keeping its first position."""
    fields: dict[str, dict[str, Any]] = {}
    struct_kw_only = any(keyword_true(k.node.keywords, "kw_only") for k in chain)
    for klass in reversed(chain):
        deco = dataclass_decorator(klass)
        if flavor == "dataclass" and deco is None:
            continue
        kw_only = flavor == "BaseModel" or (flavor == "Struct" and struct_kw_only)
        kw_only = kw_only or (isinstance(deco, ast.Call) and keyword_true(deco.keywords, "kw_only"))
        for stmt in klass.node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name, annotation = stmt.target.id, snippet(klass.text, stmt.annotation)
            if "KW_ONLY" in annotation:
                kw_only = True
                continue
            if "ClassVar" in annotation or (flavor == "BaseModel" and name.startswith("_")):
                continue
            has_default, default_src, in_init = field_default(klass.text, stmt.value)
            if in_init:
                fields[name] = {
                    "name": name,
                    "kind": "keyword_only" if kw_only else "positional_or_keyword",
                    "has_default": has_default,
                    "default_src": default_src,
                    "annotation_src": annotation,
                }
    return list(fields.values())



def class_signature(found: Found) -> dict[str, Any]:
    chain = mro(found, restrict=top_package(found))
    for i, klass in enumerate(chain):
        init = binding(klass.node.body, "__init__")
        if isinstance(init, (ast.FunctionDef, ast.AsyncFunctionDef)):
            at = Found(klass.module, klass.path, init, [*klass.qual, "__init__"])
            return function_signature(at, True, "{}.__init__".format(".".join(klass.qual)))
        flavor = record_flavor(chain[i:])
        if flavor:
            return {
                "params": record_params(chain[i:], flavor),
                "returns_src": None,
                "path": klass.path,
                "lineno": klass.node.lineno,
                "derived_from": f"{flavor} fields",
            }
    return {
        "params": [],
        "returns_src": None,
        "path": found.path,
        "lineno": found.node.lineno,
        "derived_from": "object",
    }
