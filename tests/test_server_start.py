"""How a two-process job's server start ends, on servers that start in a second (Python's own http.server and
one-line scripts), real processes on 127.0.0.1 and medic's real graph: a server that exits before its health
endpoint answers is a fault of its own, whatever its exit code (the client never ran: there is no output to
check); a server that listens on another port than the one medic asked is asked where its log says it listens."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent.config import Budgets, SessionConfig, Target
from agent.session import run_session
from tests.test_server_job_small import gone, server_events

CLIENT = """import sys, urllib.request
assert urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=5).status == 200
open("out.txt", "w").write("ok")
"""


def job(tmp_path: Path, server: list[str], session: str) -> SessionConfig:
    work = tmp_path / "job"
    (work / "www").mkdir(parents=True)
    (work / "www" / "health").write_text("ok\n")
    (work / "client.py").write_text(CLIENT)
    target = Target(python=sys.executable, workdir=str(work), command=["python", "client.py", "{port}"],
                    server_command=server, env={"PYTHONUNBUFFERED": "1"},
                    validate_command=["python", "-c", "assert open('out.txt').read() == 'ok'"])
    return SessionConfig(session_id=session, target=target, traces_dir=str(tmp_path / "traces"),
                         budgets=Budgets(max_launches=2), scan=False)


@pytest.mark.parametrize("code", [0, 3])
def test_a_server_that_exits_before_it_is_ready_is_its_own_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  code: int) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    config = job(tmp_path, ["python", "-c", f"print('config read, nothing to serve'); raise SystemExit({code})",
                            "{port}"], f"early-{code}")
    outcome, values = run_session(config)
    assert outcome != "verified"
    fault = values["faults"][0]
    assert fault["exc_type"] == "ServerNotReady" and fault["side"] == "server", fault
    assert f"the server exited {code} after " in fault["message"], fault["message"]
    assert "before /health answered; the client never ran" in fault["message"]
    assert "nothing to serve" in fault["message"]  # its log's last words
    assert not [launch for launch in values["launches"] if launch["kind"] == "target"]  # no client run
    assert "cannot check the output" not in str(values.get("outcome_detail"))


def test_a_server_that_announces_another_port_is_asked_there(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    # port 0: the system picks one, which only the server's own "Serving HTTP on ... port N" line says
    config = job(tmp_path, ["python", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", "www"],
                 "moved")
    config = config.model_copy(update={"target": config.target.model_copy(update={"server_ready_timeout": 30.0})})
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    events = server_events(config)
    ready = next(e for e in events if e["event"] == "ready")
    started = next(e for e in events if e["event"] == "started")
    assert ready["port"] != started["port"] and values["servers"][0]["port"] == ready["port"]
    assert ready["seconds"] < 30  # asked where it listens, not polled until the ready timeout
    assert gone(int(ready["pid"]))


def test_medic_stopped_while_its_server_loads_says_what_is_left_and_medic_stop_ends_it(tmp_path: Path) -> None:
    """SIGINT while the server loads (here: never answers): the last lines name the server left running and
    how to end it; `medic stop` ends it, and nothing of it is left."""
    import json
    import os
    import signal
    import subprocess
    import time

    work = tmp_path / "job"
    work.mkdir()
    (work / "client.py").write_text(CLIENT)
    env = {**os.environ, "MEDIC_HOME": str(tmp_path / "home")}
    medic = [sys.executable, "-m", "agent.cli"]
    trace = tmp_path / "traces" / "left.jsonl"
    proc = subprocess.Popen([*medic, "run", "--python", sys.executable, "--workdir", str(work), "--traces",
                             str(tmp_path / "traces"), "--session", "left", "--no-scan", "--server",
                             "python -c 'import time; time.sleep(300)' --port {port}",
                             "--", "python", "client.py", "{port}"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                            env=env, cwd=Path(__file__).parents[1])
    try:
        deadline = time.monotonic() + 120
        started = None
        while started is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            rows = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
            started = next((r["data"] for r in rows if r.get("kind") == "server"
                            and r["data"].get("event") == "started"), None)
        assert started is not None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 9, err[-2000:]
    assert (f"server S1 (port {started['port']}) left running on local: `medic resume left` reuses it, "
            "`medic stop left` ends it") in err
    pid = int((Path(started["run_dir"]) / "pid").read_text())
    assert not gone(pid, grace=1.0)  # stopped medic leaves its server up, on purpose: resume reuses it
    ended = subprocess.run([*medic, "stop", "left"], capture_output=True, text=True, timeout=120, env=env,
                           stdin=subprocess.DEVNULL, cwd=Path(__file__).parents[1])
    assert ended.returncode == 0, ended.stderr
    assert f"ended server S1 (port {started['port']})" in ended.stderr
    assert gone(pid)


def test_what_is_left_running_is_read_from_the_trace(tmp_path: Path) -> None:
    """A server restarted after a server-side fix is not left; the one started after it is, and a launch with
    no run_end is too (`medic stop` ends both); --keep-server's line names the last server only."""
    from agent.cli.stop import left_line, left_running
    from agent.record.trace import TraceWriter
    from tools.redact import Redactor

    path = tmp_path / "t.jsonl"
    w = TraceWriter(path, {"session": "t"}, Redactor())
    w.event("server", "launch", {"event": "started", "n": 1, "run_dir": "/w/S1", "port": 8000})
    w.event("launch", "launch", {"n": 1, "kind": "target", "run_dir": "/w/L1"})
    w.event("run_end", "watch", {"outcome": "crashed", "launch": 1})
    w.event("server", "launch", {"event": "stopped", "n": 1, "why": "a server-side fix"})
    w.event("server", "launch", {"event": "started", "n": 2, "run_dir": "/w/S2", "port": 8001})
    w.event("launch", "launch", {"n": 2, "kind": "target", "run_dir": "/w/L2"})
    w.close()
    assert [(r.what, r.run_dir) for r in left_running(path)] == [
        ("server S2 (port 8001)", "/w/S2"), ("launch 2 (target)", "/w/L2")]
    assert left_line(path, "t", "gpu-box", last_only=True) == (
        "server S2 (port 8001) left running on gpu-box: `medic resume t` reuses it, `medic stop t` ends it")
    # a canary's launch names the target started beside it: left running too until its own launch ends
    beside = tmp_path / "b.jsonl"
    w = TraceWriter(beside, {"session": "b"}, Redactor())
    w.event("launch", "launch", {"n": 1, "kind": "canary", "run_dir": "/w/L1", "target_beside": "/w/L2"})
    w.event("run_end", "watch", {"outcome": "exited", "launch": 1})
    w.close()
    assert [(r.what, r.run_dir) for r in left_running(beside)] == [
        ("launch 2 (target, started beside the canary)", "/w/L2")]


def test_the_port_a_server_announces_is_read_from_its_own_words() -> None:
    from tools.server_job import announced_port

    assert announced_port("(APIServer pid=7) INFO 12-05 08:40:01 [api_server.py:1900] Starting vLLM API server 0 "
                          "on http://0.0.0.0:8000\n") == 8000
    assert announced_port("INFO:     Uvicorn running on http://127.0.0.1:41234 (Press CTRL+C to quit)\n") == 41234
    assert announced_port("Serving HTTP on 127.0.0.1 port 5000 (http://127.0.0.1:5000/) ...\n") == 5000
    # a download or a client URL is no announcement of where this server listens
    assert announced_port("Starting download of https://huggingface.co:443/m/config.json\n") is None
    assert announced_port("POST http://127.0.0.1:8000/v1/completions 200\n") is None
