"""Run by a lab's python: every decorated or wrapped callable of the installed packages, the probe's
"rejects keyword k" verdict (the probe as medic sends it, and the pre-decorator reading it replaced), checked
against the callable itself: ``inspect.signature(outer, follow_wrapped=False)`` binding, and where that takes
any keyword a real call that stops at argument binding (no positional argument; a hung or odd call is
"inconclusive", never counted either way).

argv: probe script file, packages (comma-separated), seconds to spend importing. Prints one JSON line.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import io
import json
import re
import signal
import sys
import time
from typing import Any

FRESH = "medic_corpus_kw"
NOT_CALLABLE = ("property", "cached_property", "setter", "getter", "deleter", "overload")
BINDING_ERRORS = re.compile(r"missing \d+ required|takes \d+ positional|takes no arguments|"
                            r"positional arguments? but|required keyword-only")


class Hung(Exception):
    pass


def on_alarm(signum: int, frame: Any) -> None:
    raise Hung()


def decorated_targets(ns: dict[str, Any], package: str) -> Any:
    """(module, qualname parts, node) of each decorated def/class, at top level or in a top-level class; files
    are parsed as the walk reaches them (the walk stops when the time is spent)."""
    for root, path in ns["package_files"](package):
        if "/tests/" in path or path.endswith("conftest.py"):
            continue
        rel = path[len(root) + 1 : -3].replace("/", ".")
        module = package + ("" if rel == "__init__" else "." + rel.removesuffix(".__init__"))
        try:
            tree = ns["parse"](path)[1]
        except Exception:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.decorator_list:
                yield module, [node.name], node
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.decorator_list:
                        yield module, [node.name, item.name], item


def wrapper_strings(obj: Any) -> list[str]:
    """Names a wrapper chain may consume: its own named parameters, identifiers among its code's constants."""
    names: list[str] = []
    with contextlib.suppress(Exception):
        names += [p.name for p in inspect.signature(obj, follow_wrapped=False).parameters.values()
                  if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    layer, depth = obj, 0
    while hasattr(layer, "__wrapped__") and depth < 5:
        codes = [getattr(layer, "__code__", None)]
        while codes:
            code = codes.pop()
            if code is None:
                continue
            for const in code.co_consts:
                if isinstance(const, str) and const.isidentifier() and not const.startswith("__"):
                    names.append(const)
                elif hasattr(const, "co_consts"):
                    codes.append(const)
        layer, depth = layer.__wrapped__, depth + 1
    return list(dict.fromkeys(names))[:6]


def ground_truth(obj: Any, keyword: str, is_class: bool) -> str:
    try:
        outer = inspect.signature(obj, follow_wrapped=False)
    except (TypeError, ValueError):
        outer = None
    if outer is not None and not is_class:
        param = outer.parameters.get(keyword)
        if param is not None and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
            return "accepted"
        if not any(p.kind == p.VAR_KEYWORD for p in outer.parameters.values()):
            return "rejected"
    signal.alarm(3)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            obj(**{keyword: object()})
        return "accepted"
    except Hung:
        return "inconclusive"
    except BaseException as exc:  # whatever the callable raises is the answer
        text = str(exc)
        if keyword in text and ("unexpected keyword" in text or "Extra inputs" in text or "not permitted" in text
                                or "Unexpected keyword" in text):
            return "rejected"
        if keyword not in text and (BINDING_ERRORS.search(text) or type(exc).__name__ == "ValidationError"):
            return "accepted"  # binding went past the keyword (unexpected keywords are checked first)
        return "inconclusive"
    finally:
        signal.alarm(0)


def old_reading(ns: dict[str, Any], found: Any) -> dict[str, Any]:
    """What the probe answered before it read decorators and whole MROs: the bare def, or the package's
    own ``__init__``/fields."""
    if isinstance(found.node, ast.ClassDef):
        return ns["class_signature"](found)
    is_method = len(found.qual) > 1 and ns["method_kind"](found.node) != "staticmethod"
    return ns["function_signature"](found, is_method)


def old_rejects(record: dict[str, Any], keyword: str) -> bool:
    params = record["params"]
    return not any(p["kind"] == "var_keyword" for p in params) and keyword not in {p["name"] for p in params}


def main() -> None:
    ns: dict[str, Any] = {"__name__": "medic_probe"}
    exec(compile(open(sys.argv[1]).read(), "<medic probe>", "exec"), ns)  # medic's own probe
    packages, budget = sys.argv[2].split(","), float(sys.argv[3])
    signal.signal(signal.SIGALRM, on_alarm)
    start, modules_ok, modules_failed, callables = time.monotonic(), 0, 0, 0
    rows: list[list[Any]] = []
    spent = {"import": 0.0, "probe": 0.0, "truth": 0.0}
    probe_errors, total = 0, 0
    for package in packages:  # each package gets its share of time, counted after its first import (torch...)
        deadline = None
        imported: dict[str, Any] = {}
        for module, qual, node in decorated_targets(ns, package):
            if deadline is not None and time.monotonic() > deadline:
                break
            total += 1
            names = [ast.unparse(d.func if isinstance(d, ast.Call) else d).rpartition(".")[2]
                     for d in node.decorator_list]
            if any(n in NOT_CALLABLE for n in names):
                continue
            if module not in imported:
                t0 = time.monotonic()
                try:  # no alarm here: an import cut short leaves torch half set up (and a crash later)
                    with contextlib.redirect_stdout(io.StringIO()):
                        imported[module] = importlib.import_module(module)
                    modules_ok += 1
                except Exception:  # a module this env cannot import is skipped
                    imported[module], modules_failed = None, modules_failed + 1
                deadline = deadline or time.monotonic() + budget / len(packages)
                spent["import"] += time.monotonic() - t0
            owner = imported[module]
            try:
                obj = owner
                for part in qual:
                    obj = getattr(obj, part)
            except Exception:
                continue
            if not callable(obj) or (len(qual) > 1 and isinstance(inspect.getattr_static(
                    getattr(owner, qual[0]), qual[1], None), property)):
                continue
            t0 = time.monotonic()
            try:
                found = ns["lookup"](module, qual)
                new = ns["signature_of"](found)
                old = old_reading(ns, found)
            except Exception:
                probe_errors += 1
                continue
            callables += 1
            spent["probe"] += time.monotonic() - t0
            # a caller never names self/cls: the bound call fills them
            for keyword in [k for k in dict.fromkeys([FRESH, *wrapper_strings(obj)]) if k not in ("self", "cls")]:
                verdict, before = ns["rejects_keyword"](new, keyword), old_rejects(old, keyword)
                if verdict is True or before:
                    t0 = time.monotonic()
                    truth = ground_truth(obj, keyword, isinstance(found.node, ast.ClassDef))
                    spent["truth"] += time.monotonic() - t0
                    rows.append([f"{module}:{'.'.join(qual)}", keyword, verdict, before, truth])
    print(json.dumps({
        "rows": rows, "callables": callables, "targets": total, "modules_ok": modules_ok,
        "modules_failed": modules_failed, "probe_errors": probe_errors,
        "spent": {k: round(v, 1) for k, v in spent.items()}, "seconds": round(time.monotonic() - start, 1)}))


if __name__ == "__main__":
    main()
