"""Every parse in medic's own process goes through tools/pysyntax.py, one thread at a time: CPython 3.11 fails
concurrent ``ast.parse`` calls with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905),
which ended a session in the scan (its rules read the library side by side). Code sent to the target env (the
probes) parses there, alone, and may call ``ast.parse`` itself."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from tools import pysyntax

ROOT = Path(__file__).resolve().parents[1]
# run in the target env, in a process of their own (sent as text): not medic's threads
TARGET_SIDE = {"tools/probe", "agent/repair/option_probe.py", "tools/pysyntax.py"}


def direct_parses(path: Path) -> list[int]:
    """Lines of ``ast.parse(...)`` and builtin ``compile(...)`` calls in a module's own code (not in its strings)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "parse" and isinstance(func.value, ast.Name)
                    and func.value.id == "ast") or (isinstance(func, ast.Name) and func.id == "compile"):
                lines.append(node.lineno)
    return lines


def test_medics_own_process_parses_only_through_pysyntax() -> None:
    found = {}
    for package in ("agent", "tools", "lab"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("lab/target/") or any(rel == t or rel.startswith(t + "/") for t in TARGET_SIDE):
                continue
            if lines := direct_parses(path):
                found[rel] = lines
    assert not found, f"parse through tools/pysyntax.py (python/cpython#106905): {found}"


def test_threads_parsing_at_once_each_get_their_tree_or_their_syntax_error() -> None:
    sources = [p.read_text() for p in sorted((ROOT / "agent" / "repair").glob("*.py"))]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        for i in range(30):
            try:
                pysyntax.parse(sources[(i + k) % len(sources)])
                pysyntax.check_compiles("def broken(:\n", "<bad>")
            except SyntaxError:
                continue
            except BaseException as exc:
                errors.append(exc)
            else:
                errors.append(AssertionError("a syntax error compiled"))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
