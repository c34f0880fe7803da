"""The probe the TARGET python runs to answer source questions; its text is sent on stdin.

Stdlib only, Python 3.8+, and it never imports the package it inspects (a vLLM import takes 10+ s and may
crash): modules are located with ``PathFinder`` walking each parent's search locations by hand, and read
with ``ast``. ``main(request_json)`` prints one line: ``MARK`` then ``{"ok": ..., "result"|"error": ...}``.

The probe is written as the modules of tools/probe/ (so ruff, mypy and the tests see ordinary Python), and
``PROBE_TEXT`` is them joined into one self-contained script: each part's imports of another part, and its
``from __future__`` line, are dropped, and a single ``from __future__ import annotations`` leads.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tools import pysyntax
from tools.probe.answers import MARK

__all__ = ["MARK", "PROBE_PARTS", "PROBE_TEXT", "probe_script"]

# each part may use those before it
PROBE_PARTS = (
    "modules", "resolve", "signatures", "decorators", "constructors", "callables", "records", "answers",
)
_PART_DIR = Path(__file__).with_name("probe")


def _standalone(text: str, name: str) -> str:
    """``text`` without its ``from __future__`` and ``from tools.probe...`` imports (whole statements)."""
    lines = text.split("\n")
    for stmt in reversed(pysyntax.parse(text, name).body):
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith(("__future__", "tools.probe")):
            del lines[stmt.lineno - 1 : stmt.end_lineno]
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            if any(m.split(".")[0] in ("tools", "agent", "lab") for m in modules):
                raise RuntimeError(f"probe part {name} imports {modules}: the target has no medic")
    return "\n".join(lines)


def probe_script(parts: tuple[str, ...] = PROBE_PARTS) -> str:
    """The whole probe as one script; the caller appends ``main(<request json>)``."""
    texts = [_standalone((_PART_DIR / f"{part}.py").read_text(encoding="utf-8"), part) for part in parts]
    script = "from __future__ import annotations\n\n" + "\n\n".join(texts)
    pysyntax.check_compiles(script, "<medic source probe>")  # fail here, not on the target
    return script


PROBE_TEXT = probe_script()
