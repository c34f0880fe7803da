"""The postmortem of a server + client job counts server loads and client runs, and no "target loads": a
client run loads no model (its server does), so that in-process figure would read 0 beside a loaded server."""

from __future__ import annotations

from pathlib import Path

from agent.readers.postmortem import postmortem_markdown
from agent.readers.postmortem_html import postmortem_html
from agent.readers.tracefile import read_trace
from agent.record.trace import TraceWriter
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


def test_a_two_process_jobs_faults_say_where_they_were_met_not_before_the_load(tmp_path: Path) -> None:
    """A client run loads no model and a server's first request comes after its load: "caught by a crash before
    the load" said neither."""
    w = TraceWriter(tmp_path / "sides.jsonl", {"session": "sides"}, Redactor())
    w.event("server", "launch", {"event": "started", "n": 1, "run_dir": "/w/runs/S1", "port": 8000})
    w.event("server", "launch", {"event": "ready", "n": 1, "port": 8000, "pid": 42, "seconds": 116.3})
    for n, side, summary in ((1, "client", "TypeError: strict"), (2, "server", "AttributeError: query")):
        w.event("launch", "launch", {"n": n, "kind": "target", "run_dir": f"/w/runs/L{n}"})
        w.event("run_end", "watch", {"outcome": "crashed", "exit_code": 1, "seconds": 3.0, "launch": n,
                                     "phases": {}})
        w.event("fault", "diagnose", {"stage": "crash", "summary": summary, "side": side, "server": 1})
    w.event("server", "launch", {"event": "started", "n": 2, "run_dir": "/w/runs/S2", "port": 8001})
    w.event("server", "launch", {"event": "exited", "n": 2, "port": 8001, "seconds": 0.7, "exit_code": 0})
    w.event("launch", "launch", {"n": 3, "kind": "server", "run_dir": "/w/runs/S2"})
    w.event("run_end", "watch", {"outcome": "crashed", "exit_code": 0, "seconds": 0.7, "launch": 3, "phases": {}})
    w.event("fault", "diagnose", {"stage": "crash", "summary": "ServerNotReady: the server exited 0 after 0.7 s",
                                  "side": "server", "server": 2})
    w.event("exit", "report", {"outcome": "no_repair", "detail": "no repair"})
    w.close()
    trace = read_trace(tmp_path / "sides.jsonl")
    text = postmortem_markdown(trace)
    assert "before the load" not in text and "before the load" not in postmortem_html(trace)
    faults = [line for line in text.splitlines() if line.startswith(("1. [", "2. [", "3. ["))]
    assert faults[0].endswith("caught by a client run against the loaded server (no server load spent)"), faults
    assert faults[1].endswith("caught by the loaded server, at a client's request"), faults
    assert faults[2].endswith("caught by the server's start, before its health endpoint answered (no client ran)")
