"""One vocabulary for the trace: every event kind the readers (live view, replay, postmortem) switch on is one
the writer can record (agent/events.py). mypy holds the writers to it; this holds the readers."""

from __future__ import annotations

import ast
from pathlib import Path

from agent.events import EVENT_KINDS
from agent.payloads import PAYLOADS, payload_problems
from agent.readers.replay_events import NODE_OF

ROOT = Path(__file__).resolve().parents[1]
# the live view and panel, replay and the postmortem (each over several modules) switch on the trace's event kinds
READERS = (*(f"agent/record/{name}.py" for name in ("view", "panel")),
           *(f"agent/readers/{name}.py" for name in ("replay", "replay_core", "replay_checks", "postmortem",
                                                    "postmortem_summary", "postmortem_html")))


def kinds_read(path: Path) -> set[str]:
    """Strings compared with a ``kind`` (``x.kind == "a"``, ``kind in ("a", "b")``) and the view's line table."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and "kind" in ast.unparse(node.left).split(".")[-1]:
            for comp in node.comparators:
                found |= {c.value for c in ast.walk(comp) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return found


def test_every_kind_a_reader_switches_on_is_one_the_writer_records() -> None:
    for rel in READERS:
        unknown = kinds_read(ROOT / rel) - EVENT_KINDS
        assert not unknown, f"{rel} reads event kinds nobody records: {sorted(unknown)}"
    assert set(NODE_OF) <= EVENT_KINDS


def test_every_kind_has_one_payload_and_the_check_names_what_does_not_fit() -> None:
    assert set(PAYLOADS) == EVENT_KINDS
    assert payload_problems("run_end", {"outcome": "crashed", "exit_code": 1, "seconds": 2.5}) == []
    problems = payload_problems("run_end", {"outcome": 3, "exit_cod": 1})
    assert problems == ["run_end: undeclared key 'exit_cod'", "run_end: outcome=3 is not <class 'str'>"]
