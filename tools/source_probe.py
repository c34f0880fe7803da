"""The probe the TARGET python runs to answer source questions; its text is sent on stdin.

Stdlib only, Python 3.8+, and it never imports the package it inspects (a vLLM import takes 10+ s and may
crash): modules are located with ``PathFinder`` walking each parent's search locations by hand, and read
with ``ast``. ``main(request_json)`` prints one line: ``MARK`` then ``{"ok": ..., "result"|"error": ...}``.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import site
import sys
import sysconfig
from importlib.machinery import PathFinder
from typing import Any

MARK = "<<medic-probe>> "
MAX_SNIPPET = 300  # characters of one expression or line
MAX_SOURCE_LINES = 400
MAX_FILE_BYTES = 4_000_000
RECORD_BASES = ("BaseModel", "Struct", "NamedTuple")
_parsed: dict[str, tuple[str, ast.Module]] = {}
_lines: dict[int, tuple[str, list[str]]] = {}


class ProbeError(Exception):
    pass


class Found:
    """A symbol: the module it lives in, its file, the ast node (None for the module itself), its qualname."""

    def __init__(self, module: str, path: str, node: Any, qual: list[str]) -> None:
        self.module, self.path, self.node, self.qual = module, path, node, qual

    @property
    def text(self) -> str:
        return parse(self.path)[0]

    def key(self) -> tuple[str, int]:
        return self.path, getattr(self.node, "lineno", 0)


def parse(path: str) -> tuple[str, ast.Module]:
    if path not in _parsed:
        with open(path, "rb") as fh:
            text = fh.read(MAX_FILE_BYTES).decode("utf-8", "replace")
        try:
            _parsed[path] = (text, ast.parse(text, path))
        except SyntaxError as exc:
            raise ProbeError(f"{path}:{exc.lineno} does not parse: {exc.msg}") from exc
    return _parsed[path]


def snippet(text: str, node: Any) -> str:
    """The source of ``node``, cut to MAX_SNIPPET (``ast.get_source_segment`` re-splits the file per call)."""
    if id(text) not in _lines or _lines[id(text)][0] is not text:
        _lines[id(text)] = (text, text.split("\n"))
    lines, first, last = _lines[id(text)][1], node.lineno - 1, min(node.end_lineno - 1, node.lineno + 20)
    chunk = [line.encode() for line in lines[first : last + 1]]
    if last == node.end_lineno - 1:
        chunk[-1] = chunk[-1][: node.end_col_offset]
    chunk[0] = chunk[0][node.col_offset :]
    src = b"\n".join(chunk).decode("utf-8", "replace")
    return src if len(src) <= MAX_SNIPPET else src[: MAX_SNIPPET - 3] + "..."


def find_spec(name: str) -> Any:
    """The spec of ``name`` found without importing any parent package's ``__init__``."""
    parts = name.split(".")
    spec = PathFinder.find_spec(parts[0])
    if spec is None:  # editable installs register their own finders
        for finder in sys.meta_path:
            try:
                spec = finder.find_spec(parts[0], None)
            except Exception:
                spec = None
            if spec is not None:
                break
    for i in range(1, len(parts)):
        locations = spec.submodule_search_locations if spec is not None else None
        if not locations:
            return None
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), list(locations))
    return spec


def module_file(name: str) -> str:
    spec = find_spec(name)
    if spec is None:
        raise ProbeError(f"no module {name!r} on the sys.path of {sys.executable}")
    if spec.has_location and spec.origin:
        return spec.origin
    if spec.submodule_search_locations:
        return next(iter(spec.submodule_search_locations))  # namespace package: its first folder
    raise ProbeError(f"{name} is built into {sys.executable}: there is no file to read")


def source_file(name: str) -> str:
    path = module_file(name)
    if os.path.isdir(path):
        raise ProbeError(f"{name} is a namespace package ({path}) with no source of its own")
    if not path.endswith(".py"):
        raise ProbeError(f"{name} is compiled ({path}): there is no Python source to read")
    return path


def package_of(module: str, path: str) -> str:
    return module if path.endswith("__init__.py") else module.rpartition(".")[0]


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
        for stmt in parse(path)[1].body:  # `from .x import *` (torch.nn does this)
            if isinstance(stmt, ast.ImportFrom) and [a.name for a in stmt.names] == ["*"]:
                try:
                    return lookup(absolute(module, path, stmt), names, depth + 1)
                except ProbeError:
                    continue
        raise ProbeError(f"{names[0]} is not defined in {module} ({path})")
    found = Found(module, path, node, [names[0]])
    for name in names[1:]:
        found = member(found, name)
    return found


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
        if names[-1:] == ["dataclass"] or (names and wraps_dataclass(klass, names)):
            return deco
    return None


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


def top_package(found: Found) -> str:
    return found.module.split(".")[0]


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


def signature_of(found: Found) -> dict[str, Any]:
    node = found.node
    if isinstance(node, ast.ClassDef):
        return class_signature(found)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return function_signature(found, len(found.qual) > 1 and method_kind(node) != "staticmethod")
    value = getattr(node, "value", None)
    if isinstance(value, (ast.Name, ast.Attribute)):  # an alias: `Foo = other.Bar`
        return signature_of(lookup(found.module, dotted(value)))
    raise ProbeError(
        "{} in {} is not a function or class".format(".".join(found.qual) or found.module, found.path)
    )


def location(found: Found) -> dict[str, Any]:
    lines = found.text.split("\n")  # as the parser counts lines (splitlines also breaks at \f, \x1c...)
    node = found.node
    if node is None:
        start, end, kind = 1, len(lines) - (lines[-1] == ""), "module"
    else:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        end = node.end_lineno or node.lineno
        kind = {ast.ClassDef: "class", ast.FunctionDef: "def", ast.AsyncFunctionDef: "def"}.get(
            type(node), "assign"
        )
    shown = lines[start - 1 : min(end, start - 1 + MAX_SOURCE_LINES)]
    return {
        "path": found.path,
        "module": found.module,
        "name": ".".join(found.qual),
        "kind": kind,
        "start": start,
        "end": end,
        "source": "\n".join(shown),
        "truncated": len(shown) < end - start + 1,
    }


def class_members(target: str) -> list[dict[str, Any]]:
    found = resolve(target)
    if not isinstance(found.node, ast.ClassDef):
        raise ProbeError(f"{target} is not a class ({found.path})")
    members: dict[str, dict[str, Any]] = {}

    def add(klass: Found, name: str, kind: str, lineno: int, sig: Any = None) -> None:
        if name not in members and len(members) < 800:
            members[name] = {
                "name": name,
                "kind": kind,
                "signature": sig,
                "lineno": lineno,
                "path": klass.path,
                "owner": "{}:{}".format(klass.module, ".".join(klass.qual)),
            }

    for klass in mro(found, restrict=top_package(found)):
        for name, node, _ in bindings(klass.node.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = method_kind(node)
                at = Found(klass.module, klass.path, node, [*klass.qual, name])
                sig = None if kind == "property" else function_signature(at, kind != "staticmethod")
                add(klass, name, kind, node.lineno, sig)
            elif not isinstance(node, tuple):
                add(klass, name, "attribute", node.lineno)
        init = binding(klass.node.body, "__init__")
        for stmt in ast.walk(init) if isinstance(init, ast.FunctionDef) else []:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):  # self.x = ... : an instance attribute
                for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        add(klass, t.attr, "attribute", stmt.lineno)
    return list(members.values())


def returns_of(target: str) -> list[str]:
    found = resolve(target)
    if not isinstance(found.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ProbeError(f"{target} is not a function ({found.path})")
    out: list[tuple[int, str]] = []

    def visit(node: Any) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Return):
                out.append((child.lineno, snippet(found.text, child.value) if child.value else "None"))
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child)

    visit(found.node)
    return [src for _, src in sorted(out)][:200]


def files_under(root: str, glob: str) -> Any:
    """(search root, file) for each matching file, in sorted order; caches and hidden folders skipped."""
    if os.path.isfile(root):
        yield root, root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if fnmatch.fnmatch(name, glob):
                yield root, os.path.join(folder, name)


def package_files(package: str) -> Any:
    spec = find_spec(package)
    if spec is None:
        raise ProbeError(f"no package {package!r} on the sys.path of {sys.executable}")
    for root in spec.submodule_search_locations or [spec.origin]:
        yield from files_under(root, "*.py")


def read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def call_sites(package: str, name: str, max_sites: int) -> list[dict[str, Any]]:
    called, sites = re.compile(rf"(?<!def )(?<!class )\b{re.escape(name)}\s*\("), []
    for _, path in package_files(package):
        text = read(path)
        if name not in text or not called.search(text):
            continue  # most files never mention the name: skip the parse
        try:
            text, tree = parse(path)
        except ProbeError:
            continue
        lines, calls = text.splitlines(), []
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and name in (
                getattr(func, "id", None),
                getattr(func, "attr", None),
            ):
                calls.append(node)
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            sites.append(
                {
                    "path": path,
                    "lineno": call.lineno,
                    "func_text": snippet(text, call.func),
                    "args_src": [snippet(text, a) for a in call.args],
                    "keywords": [[k.arg or "**", snippet(text, k.value)] for k in call.keywords],
                    "source_line": lines[call.lineno - 1].strip()[:MAX_SNIPPET],
                }
            )
            if len(sites) >= max_sites:
                return sites
    return sites


def locate_definitions(package: str, name: str) -> list[dict[str, Any]]:
    pattern = r"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+{0}\b|^[ \t]*{0}[ \t]*[:=]".format(re.escape(name))
    defined, out = re.compile(pattern, re.M), []
    for root, path in package_files(package):
        text = read(path)
        if name not in text or not defined.search(text):
            continue
        parts = [] if path == root else os.path.relpath(path, root)[:-3].split(os.sep)  # [] : a lone module
        if parts and parts[-1] == "__init__":
            parts.pop()
        module = ".".join([package, *parts])
        try:
            nodes = [node for n, node, _ in bindings(parse(path)[1].body) if n == name]
        except ProbeError:
            continue
        out += [location(Found(module, path, n, [name])) for n in nodes if not isinstance(n, tuple)]
    return out[:100]


def grep(root: str, pattern: str, glob: str, max_hits: int) -> list[dict[str, Any]]:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ProbeError(f"bad regular expression {pattern!r}: {exc}") from exc
    if not os.path.exists(root):
        raise ProbeError(f"{root} does not exist")
    hits: list[dict[str, Any]] = []
    for _, path in files_under(root, glob):
        for lineno, line in enumerate(read(path).splitlines(), 1):
            if regex.search(line):
                hits.append({"path": path, "lineno": lineno, "text": line[:MAX_SNIPPET]})
                if len(hits) >= max_hits:
                    return hits
    return hits


def site_packages() -> list[str]:
    found = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    found += [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    found += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    return [p for i, p in enumerate(found) if os.path.isdir(p) and p not in found[:i]]


OPS: dict[str, Any] = {
    "module_path": module_file,
    "site_packages": site_packages,
    "find_symbol": lambda target: location(resolve(target)),
    "signature": lambda target: signature_of(resolve(target)),
    "class_members": class_members,
    "returns_of": returns_of,
    "call_sites": call_sites,
    "locate_definitions": locate_definitions,
    "grep": grep,
}


def main(request_json: str) -> None:
    request = json.loads(request_json)
    # The caller's folder must not shadow the installed package; extra paths (tests, PYTHONPATH) go first.
    sys.path[:] = list(request.pop("path_extra", [])) + [p for p in sys.path if p not in ("", ".")]
    try:
        reply = {"ok": True, "result": OPS[request.pop("op")](**request)}
    except ProbeError as exc:
        reply = {"ok": False, "error": str(exc)}
    except Exception as exc:
        reply = {"ok": False, "error": f"source probe failed: {type(exc).__name__}: {exc}"}
    sys.stdout.write(MARK + json.dumps(reply) + "\n")
