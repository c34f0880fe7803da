"""The diagram in agent/graph.py's docstring is the graph: every edge it draws is wired, and every wired edge
is drawn. Read from the compiled graph (what LangGraph will run), not from the source."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from agent import graph as graph_module
from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.graph import build_graph
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from tools.host import LocalHost
from tools.redact import Redactor

ARROW = re.compile(r"─(?:\([^)]*\))?─►|─►")
NAME = re.compile(r"\[?\w+\]?")


def drawn_edges(doc: str) -> set[tuple[str, str]]:
    """Edges of the drawing: ``a ─► b`` chains split on ';', ``[x]`` an optional node (a ─► [x] ─► b draws a→x,
    x→b and a→b), and a line starting with ├─/└─ branches from the name above it in that column."""
    lines = [line for line in doc.splitlines() if "─►" in line]
    edges: set[tuple[str, str]] = set()
    for i, line in enumerate(lines):
        for chain in line.split(";"):
            stripped = chain.strip()
            parts = [p.strip() for p in ARROW.split(stripped)]
            if stripped[:1] in "├└":
                column = line.index(stripped[:1])
                parts[0] = name_above(lines[:i], column)
            names = [p for p in parts if p]
            for a, b in itertools.pairwise(names):
                edges.add((a.strip("[]"), b.strip("[]")))
            for a, x, b in zip(names, names[1:], names[2:], strict=False):
                if x.startswith("["):
                    edges.add((a.strip("[]"), b.strip("[]")))
    return edges


def name_above(lines: list[str], column: int) -> str:
    for line in reversed(lines):
        for match in NAME.finditer(line):
            if match.start() <= column < match.end():
                return match.group()
    raise AssertionError(f"no node above column {column}")


def compiled_edges(tmp_path: Path) -> set[tuple[str, str]]:
    config = SessionConfig(session_id="shape", target=Target(python="/usr/bin/python3", workdir=str(tmp_path),
                                                              command=["true"]))
    trace = TraceWriter(tmp_path / "t.jsonl", {"session": "shape"}, Redactor())
    compiled = build_graph(Deps(host=LocalHost(), config=config, engine=RepairEngine(playbooks=[]), trace=trace))
    return {(e.source, e.target) for e in compiled.get_graph().edges
            if e.source != "__start__" and e.target != "__end__"}


def test_the_docstring_diagram_is_the_compiled_graph(tmp_path: Path) -> None:
    drawn = drawn_edges(graph_module.__doc__ or "")
    wired = compiled_edges(tmp_path)
    assert drawn - wired == set(), f"drawn but not wired: {sorted(drawn - wired)}"
    assert wired - drawn == set(), f"wired but not drawn: {sorted(wired - drawn)}"


def test_the_drawing_parser_reads_branches_and_optional_nodes() -> None:
    doc = """
    a ─► b ─(x)─► [c] ─► d;  e ─► a
         └─(y)─► f
    """
    assert drawn_edges(doc) == {("a", "b"), ("b", "c"), ("c", "d"), ("b", "d"), ("e", "a"), ("b", "f")}
