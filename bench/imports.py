"""The import graph of the whole tree: ``python bench/imports.py``.

Every Python file of every folder counts (agent/, tools/, lab/, bench/, tests/, …; not dot-folders, the venv or a
built site), and every import in it, those inside functions and under ``if TYPE_CHECKING:`` too (an import moved
into a function to dodge a circle is still an arrow). Modules sit in layers, lowest first: tools → agent's data
(state, config, payloads, …) → repair and llm → codec, checks, faults and the record writers (trace, live view,
panel, report) → launchers → deps, validation, approval, store → nodes → graph, session and the record readers
(replay, postmortem, watch, trace file) → the labs (lab/: medic's own target, which the CLI builds and runs) →
cli → what stands outside medic and uses it (bench/, tests/). An arrow to a higher layer "runs back up". Printed:
each circle, each upward arrow, each node module importing another, and a last line
``modules=<n> arrows=<n> cycles=<n> node_to_node=<n> upward=<n>``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRITERS = {"agent.codec", "agent.answers", "agent.checks", "agent.faults", "agent.policy", "agent.record.trace",
           "agent.record.view", "agent.record.panel", "agent.record.report", "agent.record.people"}


def layer(module: str) -> int:
    if module.startswith(("bench.", "tests.")) or module in ("bench", "tests"):
        return 10
    if module.startswith("tools"):
        return 0
    if module.startswith("agent.cli"):
        return 9
    if module.startswith("lab"):
        return 8
    if module in ("agent.graph", "agent.session") or module.startswith("agent.readers"):
        return 7
    if module.startswith("agent.nodes"):
        return 6
    if module in ("agent.deps", "agent.validation", "agent.approval", "agent.store"):
        return 5
    if module.startswith("agent.launchers"):
        return 4
    if module in WRITERS:
        return 3
    if module.startswith(("agent.repair", "agent.llm")):
        return 2
    return 1


PACKAGES = ("agent", "tools", "lab", "bench", "tests")  # an `import lab` alone is no arrow to a module
SKIPPED = {"site", "build", "dist", "node_modules", "__pycache__"}  # what a build or a tool leaves, not source


def modules(root: Path) -> dict[str, Path]:
    """Every .py file under the repository's folders, by its dotted name (a venv, dot-folders and build output
    are not the tree)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in SKIPPED for p in parts[:-1]):
            continue
        if (root / parts[0] / "pyvenv.cfg").exists():  # a venv under another name
            continue
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def arrows(found: dict[str, Path]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {m: set() for m in found}
    for module, path in found.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                     if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            for name in names:
                while name and name not in found:
                    name = name.rpartition(".")[0]
                if name and name != module and not module.startswith(name + ".") and name not in PACKAGES:
                    out[module].add(name)
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    sys.setrecursionlimit(10_000)
    for v in edges:
        if v not in index:
            visit(v)
    return found


def main() -> int:
    found = modules(ROOT)
    edges = arrows(found)
    cycles = circles(edges)
    node_to_node = [(a, b) for a in edges for b in edges[a] if a.startswith("agent.nodes.")
                    and b.startswith("agent.nodes.")]
    upward = [(a, b) for a in edges for b in edges[a] if layer(b) > layer(a)]
    for part in cycles:
        print("circle:", " ".join(part))
    for a, b in node_to_node:
        print("node imports node:", a, "->", b)
    for a, b in upward:
        print("runs back up:", a, "->", b)
    print(f"modules={len(found)} arrows={sum(len(v) for v in edges.values())} cycles={len(cycles)} "
          f"node_to_node={len(node_to_node)} upward={len(upward)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
