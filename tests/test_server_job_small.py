"""The two-process machinery on a server that loads in a second: Python's own http.server (its /health is a
file) and a client with a drift (``HTTPConnection(..., strict=True)``, a keyword Python 3.4 removed; the scan
is off, so the drift costs a client run, as one the scan cannot see would). Real
processes, real ports on 127.0.0.1, medic's real graph and checkpointer; the vLLM server lab
(tests/test_server_job.py) shows the same on the real thing, at a load's price.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from agent.config import Budgets, SessionConfig, Target
from agent.session import run_session

CLIENT = """import sys
from http.client import HTTPConnection

conn = HTTPConnection("127.0.0.1", int(sys.argv[1]), strict=True)
conn.request("GET", "/health")
status = conn.getresponse().status
assert status == 200, status
open("out.txt", "w").write("ok")
"""


def gone(pid: int, grace: float = 10.0) -> bool:
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.2)
    return False


def job(tmp_path: Path, mode: str = "unattended") -> SessionConfig:
    work = tmp_path / "job"
    (work / "www").mkdir(parents=True)
    (work / "www" / "health").write_text("ok\n")
    (work / "client.py").write_text(CLIENT)
    target = Target(python=sys.executable, workdir=str(work), command=["python", "client.py", "{port}"],
                    server_command=["python", "-m", "http.server", "{port}", "--bind", "127.0.0.1",
                                    "--directory", "www"],
                    validate_command=["python", "-c", "assert open('out.txt').read() == 'ok'"],
                    library_packages=["http"])
    return SessionConfig(session_id=f"small-{mode}", target=target, traces_dir=str(tmp_path / "traces"),
                         mode=mode, budgets=Budgets(max_launches=4), scan=False)  # type: ignore[arg-type]


def server_events(config: SessionConfig) -> list[dict]:
    rows = [json.loads(line) for line in (Path(config.traces_dir) / f"{config.session_id}.jsonl").read_text()
            .splitlines() if line.strip()]
    return [row["data"] for row in rows if row.get("kind") == "server"]


def test_a_client_fix_reruns_the_client_against_the_same_server(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    config = job(tmp_path)
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    assert len(values["servers"]) == 1 and values["servers"][0]["clients"] == 2
    clients = [launch for launch in values["launches"] if launch["kind"] == "target"]
    assert len(clients) == 2 and values["faults"][0]["side"] == "client"
    assert "strict" in values["faults"][0]["message"]
    assert "strict=True" not in (tmp_path / "job" / "client.py").read_text()
    events = server_events(config)
    assert [e["event"] for e in events] == ["started", "ready", "reused"]
    assert gone(int(events[1]["pid"]))  # the session ended, its server with it


def test_resume_after_an_approval_finds_the_server_still_loaded(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting for a person costs no load: the server stays up while the patch waits, and the resumed session
    runs the client against it instead of starting a second one."""
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    config = job(tmp_path, mode="approve")
    outcome, values = run_session(config)
    assert outcome == "waiting"
    ready = [e for e in server_events(config) if e["event"] == "ready"]
    assert len(ready) == 1 and not gone(int(ready[0]["pid"]), grace=0.5)
    outcome, values = run_session(config, resume={"action": "approve", "by": "test"})
    assert outcome == "verified", values.get("outcome_detail")
    events = server_events(config)
    assert [e["event"] for e in events] == ["started", "ready", "reused"]
    assert len(values["servers"]) == 1
    assert gone(int(ready[0]["pid"]))


SERVER = """import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body = b"ok"
        else:
            body = urlsplit(self.path, scheme="", allow_fragments=True, strict=True).path.encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
ASKING_CLIENT = """import sys
from http.client import HTTPConnection

conn = HTTPConnection("127.0.0.1", int(sys.argv[1]))
conn.request("GET", "/v1/hidden")
body = conn.getresponse().read().decode()
assert body == "/v1/hidden", body
open("out.txt", "w").write("ok")
"""


def test_a_client_http_error_caused_by_a_server_traceback_is_fixed_on_the_server_and_restarts_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's handler raises (a keyword urlsplit no longer takes) and drops the connection; the client
    dies in http.client with RemoteDisconnected. The root cause is the server's traceback, the fix goes to the
    server's script, and the server is restarted for it: two loads, and the client's second run verifies."""
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    config = job(tmp_path)
    work = Path(config.target.workdir)
    (work / "server.py").write_text(SERVER)
    (work / "client.py").write_text(ASKING_CLIENT)
    target = config.target.model_copy(update={"server_command": ["python", "server.py", "{port}"],
                                              "library_packages": ["http", "urllib"]})
    config = config.model_copy(update={"target": target, "session_id": "small-server-side"})
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    fault = values["faults"][0]
    assert fault["side"] == "server" and "strict" in fault["message"] and fault["server"] == 1
    assert values["patches"][0]["patch"]["files"][0]["path"].endswith("/server.py")
    events = server_events(config)
    assert [e["event"] for e in events] == ["started", "ready", "stopped", "started", "ready"]
    assert len(values["servers"]) == 2 and values["servers"][0]["outcome"] == "stopped"
    assert all(gone(int(e["pid"])) for e in events if e["event"] == "ready")


def test_the_cli_runs_a_server_job_and_refuses_a_port_without_a_server(tmp_path: Path) -> None:
    import os
    import subprocess

    work = tmp_path / "job"
    (work / "www").mkdir(parents=True)
    (work / "www" / "health").write_text("ok\n")
    (work / "client.py").write_text(CLIENT.replace(", strict=True", ""))
    env = {**os.environ, "MEDIC_HOME": str(tmp_path / "home")}
    medic = [sys.executable, "-m", "agent.cli", "run", "--python", sys.executable, "--workdir", str(work),
             "--traces", str(tmp_path / "traces"), "--no-scan"]
    ran = subprocess.run([*medic, "--session", "cli-server", "--server",
                          "python -m http.server {port} --bind 127.0.0.1 --directory www",
                          "--validate", "python -c \"assert open('out.txt').read() == 'ok'\"",
                          "--", "python", "client.py", "{port}"],
                         capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL,
                         cwd=Path(__file__).parents[1])
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "server S1 ready" in ran.stderr
    bad = subprocess.run([*medic, "--session", "cli-bad", "--port", "8000", "--", "python", "client.py"],
                         capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
                         cwd=Path(__file__).parents[1])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith("--port and --keep-server go "
                                                                                 "with --server")
    assert not (tmp_path / "home" / "sessions" / "cli-bad").exists()


def test_medic_killed_while_the_client_runs_resumes_against_the_same_server(tmp_path: Path) -> None:
    """SIGKILL medic once its client is running: server and client are detached and go on; `medic resume`
    follows the same client and verifies, with no second server start; then nothing of either is left."""
    import os
    import signal
    import subprocess

    work = tmp_path / "job"
    (work / "www").mkdir(parents=True)
    (work / "www" / "health").write_text("ok\n")
    (work / "client.py").write_text("import time\ntime.sleep(6)\n" + CLIENT.replace(", strict=True", ""))
    env = {**os.environ, "MEDIC_HOME": str(tmp_path / "home")}
    traces = tmp_path / "traces"
    run = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--python", sys.executable, "--workdir",
                            str(work), "--traces", str(traces), "--no-scan", "--session", "killed",
                            "--server", "python -m http.server {port} --bind 127.0.0.1 --directory www",
                            "--validate", "python -c \"assert open('out.txt').read() == 'ok'\"",
                            "--", "python", "client.py", "{port}"],
                           env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd=Path(__file__).parents[1])
    trace = traces / "killed.jsonl"
    deadline = time.monotonic() + 120
    while not (trace.exists() and '"kind": "launch"' in trace.read_text()):
        assert time.monotonic() < deadline and run.poll() is None, "medic never launched the client"
        time.sleep(0.1)
    time.sleep(0.5)  # past the launch node's checkpoint, inside watch
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    ready = [json.loads(line)["data"] for line in trace.read_text().splitlines()
             if '"kind": "server"' in line and '"ready"' in line]
    assert len(ready) == 1 and not gone(int(ready[0]["pid"]), grace=0.5)  # the server outlived medic
    resumed = subprocess.run([sys.executable, "-m", "agent.cli", "resume", "killed"], env=env, capture_output=True,
                             text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=Path(__file__).parents[1])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    events = [json.loads(line)["data"]["event"] for line in trace.read_text().splitlines()
              if '"kind": "server"' in line]
    assert events.count("started") == 1
    assert gone(int(ready[0]["pid"]))


SPLIT = '''            body = urlsplit(self.path, scheme="", allow_fragments=True, strict=True).path.encode()'''
DYING_SERVER = SERVER.replace(SPLIT, '''            try:
                body = urlsplit(self.path, scheme="", allow_fragments=True, strict=True).path.encode()
            except Exception:  # as vLLM's engine does: the traceback, then the whole server goes
                import os, traceback
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)''')
RETRYING_CLIENT = """import sys, time
from http.client import HTTPConnection

while True:
    try:
        conn = HTTPConnection("127.0.0.1", int(sys.argv[1]))
        conn.request("GET", "/v1/hidden")
        body = conn.getresponse().read().decode()
        break
    except OSError as exc:
        print("retrying:", exc, flush=True)
        time.sleep(0.5)
assert body == "/v1/hidden", body
open("out.txt", "w").write("ok")
"""


def test_a_server_that_dies_under_a_retrying_client_ends_the_client_run(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The server logs its traceback and exits on the first request; the client retries for ever and prints no
    traceback. medic stops the client once its server is gone (not at the launch timeout), reads the server's
    traceback as the fault, fixes the server and restarts it: the second client run verifies."""
    assert DYING_SERVER != SERVER
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    config = job(tmp_path)
    work = Path(config.target.workdir)
    (work / "server.py").write_text(DYING_SERVER)
    (work / "client.py").write_text(RETRYING_CLIENT)
    target = config.target.model_copy(update={"server_command": ["python", "server.py", "{port}"],
                                              "library_packages": ["http", "urllib"]})
    budgets = config.budgets.model_copy(update={"launch_timeout": 300.0})
    config = config.model_copy(update={"target": target, "session_id": "small-dies", "budgets": budgets})
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    first = values["launches"][0]
    assert first["kind"] == "target" and first["outcome"] == "crashed"
    assert first["ended"] - first["started"] < 60  # stopped with its server, not at the 300 s launch timeout
    fault = values["faults"][0]
    assert fault["side"] == "server" and "strict" in fault["message"]
    assert values["patches"][0]["patch"]["files"][0]["path"].endswith("/server.py")
    assert [e["event"] for e in server_events(config)][:3] == ["started", "ready", "gone"]
