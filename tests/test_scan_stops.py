"""The scan saves loads; nothing needs it. A host that does not answer it in time ends the scan, said in the trace,
and the launch goes ahead (it meets what the scan did not read): never the session's end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes import scan as scan_node
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from tools.errors import CommandTimeout
from tools.host import FunctionHost
from tools.redact import Redactor


def test_a_probe_past_its_deadline_ends_the_scan_not_the_session(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def too_slow(*_: Any) -> list[Any]:
        raise CommandTimeout("command ran past 30s and was killed: ls -1 '/env/site-packages/vllm'/*.py")

    monkeypatch.setattr(scan_node, "scan_drift", too_slow)
    target = Target(python="/env/bin/python", workdir="/work", command=["python", "extract.py"])
    deps = Deps(host=FunctionHost(lambda line: (1, "")), config=SessionConfig(session_id="s", target=target),
                engine=RepairEngine(), trace=TraceWriter(tmp_path / "t.jsonl", {"session": "s"}, Redactor()))
    update = scan_node.scan({"scan_attempted": ["scan:one"]}, deps)
    assert update["scan_done"] and update["fault"] is None
    said = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()[1:]]
    assert [e["kind"] for e in said] == ["scan"]
    assert said[0]["data"]["findings"] == 1 and "ran past 30s" in said[0]["data"]["stopped"]
    assert "the launches will meet what it did not read" in said[0]["data"]["summary"]
