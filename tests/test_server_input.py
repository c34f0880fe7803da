"""A two-process job's input that medic can prove wrong is refused before any load (tools/server_input.py): exit 2,
one line, in seconds, with no session, trace or process left. Each case here used to cost a server load or hang
for the ready timeout (30 min) while the server listened on a port medic never polled."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.errors import UsageError
from tools.host import LocalHost
from tools.server_input import check_commands, check_model_folders

SERVE = ["python", "-m", "vllm.entrypoints.cli.main", "serve", "/m"]
SPEC = '{"method":"extract_hidden_states","draft_model_config":{"hf_config":{"eagle_aux_hidden_state_layer_ids":[1]}}}'
CLIENT = ["speculators", "generate-offline-data", "--endpoint", "http://127.0.0.1:{port}/v1"]


def refused(server: list[str], client: list[str], port: int | None = None) -> str:
    with pytest.raises(UsageError) as err:
        check_commands(server, client, port)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_server_with_no_port_medic_can_know_is_refused() -> None:
    assert "--server names no port" in refused(SERVE, CLIENT)
    assert "{port}" in refused(SERVE, CLIENT)  # the line says what to write


def test_the_port_a_server_names_itself_is_the_one_polled_and_must_agree_with_port() -> None:
    assert check_commands([*SERVE, "--port", "8123"], CLIENT, None) == 8123
    assert check_commands([*SERVE, "--port=8123"], CLIENT, 8123) == 8123
    assert "--port 9000, but --server listens on --port 8123" in refused([*SERVE, "--port", "8123"], CLIENT, 9000)
    assert check_commands([*SERVE, "--port", "{port}"], CLIENT, None) is None  # medic picks a free one
    assert check_commands(SERVE, CLIENT, 8200) == 8200  # the user says where the server listens


def test_a_client_endpoint_on_another_port_is_refused() -> None:
    server = [*SERVE, "--port", "{port}"]
    other = ["speculators", "generate-offline-data", "--endpoint", "http://127.0.0.1:8000/v1"]
    assert "names port 8000" in refused(server, other)
    assert "names port 8000, but the server listens on port 8001" in refused(server, other, 8001)
    assert check_commands(server, other, 8000) == 8000
    assert "names no port" in refused(server, ["python", "c.py", "--url=http://localhost/v1"])
    assert "add `--endpoint http://127.0.0.1:{port}/v1`" in refused(server, ["speculators", "generate-offline-data"])
    # a URL elsewhere (the Hub) is no endpoint of this server; an unknown client may take its port otherwise
    assert check_commands(server, ["python", "c.py", "https://huggingface.co/x", "{port}"], None) is None
    assert check_commands(server, ["python", "c.py"], None) is None


def test_a_json_option_that_does_not_parse_is_refused() -> None:
    good = [*SERVE, "--port", "{port}", "--speculative_config", SPEC]
    assert check_commands(good, CLIENT, None) is None
    said = refused([*SERVE, "--port", "{port}", "--speculative_config", SPEC[:-1]], CLIENT)
    assert said.startswith("--server: the value of --speculative_config is not JSON (")
    assert "--kv_transfer_config is not JSON" in refused([*SERVE, "--kv_transfer_config={'a': 1}"], CLIENT)


def test_a_model_path_not_on_the_host_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    host = LocalHost()
    check_model_folders(host, ["vllm", "serve", str(tmp_path / "m")], ["c", "--model", "org/name"], str(tmp_path))
    check_model_folders(host, ["vllm", "serve", "org/name"], ["c"], str(tmp_path))  # a Hub id: the library's
    with pytest.raises(UsageError, match=r"the model folder \./gone is not on local"):
        check_model_folders(host, ["vllm", "serve", str(tmp_path / "m")], ["c", "--model", "./gone"], str(tmp_path))


@pytest.mark.parametrize(("server", "said"), [
    ("python -m http.server --bind 127.0.0.1", "--server names no port"),
    ("python -m http.server {port} --speculative_config {\"a\":", "--speculative_config is not JSON"),
    ("python -m http.server {port} --model ./no-model", "the model folder ./no-model is not on"),
])
def test_the_cli_refuses_in_seconds_with_nothing_left(tmp_path: Path, server: str, said: str) -> None:
    work = tmp_path / "job"
    work.mkdir()
    (work / "client.py").write_text("print('never run')\n")
    env = {**os.environ, "MEDIC_HOME": str(tmp_path / "home")}
    started = time.monotonic()
    ran = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--python", sys.executable, "--workdir",
                          str(work), "--traces", str(tmp_path / "traces"), "--session", "bad", "--server", server,
                          "--", "python", "client.py", "http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
                         cwd=Path(__file__).parents[1])
    assert ran.returncode == 2, ran.stderr[-2000:]
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], ran.stderr
    assert time.monotonic() - started < 60
    assert not (tmp_path / "home" / "sessions" / "bad").exists() and not (tmp_path / "traces").exists()
    assert sorted(p.name for p in work.iterdir()) == ["client.py"]  # no .medic, no run folder
