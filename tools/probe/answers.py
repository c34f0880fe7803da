"""The questions the probe answers (``OPS``) and ``main``, which reads one request and prints one reply:
``MARK`` then ``{"ok": ..., "result"|"error": ...}``.

Part of the source probe (see tools/source_probe.py): stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ast
import json
import os
import re
import site
import sys
import sysconfig
from typing import Any

from tools.probe.callables import signature_of
from tools.probe.modules import (
    MAX_SNIPPET,
    Found,
    ProbeError,
    files_under,
    module_file,
    package_files,
    parse,
    read,
    snippet,
)
from tools.probe.resolve import binding, bindings, method_kind, mro, resolve, top_package
from tools.probe.signatures import function_signature

MARK = "<<medic-probe>> "
MAX_SOURCE_LINES = 400


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


def class_members(target: str, all_bases: bool = False) -> list[dict[str, Any]]:
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

    for klass in mro(found, restrict=None if all_bases else top_package(found)):
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
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in [e for x in targets for e in (x.elts if isinstance(x, ast.Tuple) else [x])]:
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



def call_sites(package: str, name: str, max_sites: int | None) -> list[dict[str, Any]]:
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
            if max_sites is not None and len(sites) >= max_sites:
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


def answer(request: dict[str, Any]) -> dict[str, Any]:
    request = dict(request)
    try:
        return {"ok": True, "result": OPS[request.pop("op")](**request)}
    except ProbeError as exc:
        return {"ok": False, "error": str(exc)}
    except Exception as exc:
        return {"ok": False, "error": f"source probe failed: {type(exc).__name__}: {exc}"}


# many questions, one process: each answer (or its error) in the order asked
OPS["many"] = lambda requests: [answer(request) for request in requests]


def main(request_json: str) -> None:
    request = json.loads(request_json)
    # The caller's folder must not shadow the installed package; extra paths (tests, PYTHONPATH) go first.
    sys.path[:] = list(request.pop("path_extra", [])) + [p for p in sys.path if p not in ("", ".")]
    sys.stdout.write(MARK + json.dumps(answer(request)) + "\n")
