"""The postmortem of a server + client job counts server loads and client runs, and no "target loads": a
client run loads no model (its server does), so that in-process figure would read 0 beside a loaded server."""

from __future__ import annotations

from pathlib import Path

from agent.record.postmortem import postmortem_markdown
from agent.record.postmortem_html import postmortem_html
from agent.record.trace import TraceWriter
from agent.record.tracefile import read_trace
from tools.redact import Redactor


def session(path: Path, server: bool) -> Path:
    w = TraceWriter(path, {"session": path.stem}, Redactor())
    if server:
        w.event("server", "launch", {"event": "started", "n": 1, "run_dir": "/w/runs/S1", "log": "/w/runs/S1/log",
                                     "port": 8000, "command": ["python", "-m", "vllm.entrypoints.cli.main"]})
        w.event("server", "launch", {"event": "ready", "n": 1, "port": 8000, "pid": 42, "run_dir": "/w/runs/S1",
                                     "seconds": 116.3, "exit_code": None})
    w.event("launch", "launch", {"n": 1, "kind": "target", "run_dir": "/w/runs/L1"})
    w.event("run_end", "watch", {"outcome": "exited", "exit_code": 0, "seconds": 17.6, "launch": 1, "phases": {}})
    w.event("exit", "report", {"outcome": "verified", "detail": "verified by medic's own check"})
    w.close()
    return path


def test_a_server_job_counts_server_loads_and_client_runs_not_target_loads(tmp_path: Path) -> None:
    trace = read_trace(session(tmp_path / "server.jsonl", server=True))
    text = postmortem_markdown(trace)
    assert "target loads" not in text
    assert "server loads: 1 (S1 port 8000 pid 42: ready after 116.3 s), client runs: 1" in text
    assert "target loads" not in postmortem_html(trace)


def test_an_in_process_job_still_counts_its_target_loads(tmp_path: Path) -> None:
    trace = read_trace(session(tmp_path / "inproc.jsonl", server=False))
    assert "- target loads: 0" in postmortem_markdown(trace) and "server loads" not in postmortem_markdown(trace)
    assert "target loads: 0" in postmortem_html(trace)
