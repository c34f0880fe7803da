"""A job that is the user's own wrapper (issue 36, items 1 and 2), fast: no lab, no model.

Reading through: the server and client a shell script or a Python launcher runs, split as the shell would, their
variables resolved where the script assigns them; what medic cannot read is named. Running: the job's own
``python`` is the target env's (activated), and the root cause is the interpreter's first fatal line, not the
script's last echo, with which python ran and which was meant.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli.run import run as medic_run
from agent.config import SessionConfig, Target
from agent.faults import fault_from_log, ran_instead
from agent.job import seen_through
from agent.launchers.base import LauncherDeps, job_environment
from tools import runs
from tools.host import Host, LocalHost
from tools.validate_output import builtin_check
from tools.wrapper import read_wrapper, with_python
from tools.wrapper_shell import script_commands

SPEC = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5, 8]}}}

RUN_SH = """#!/bin/bash
# upstream's shape: the server in the background, a health loop, the client, then kill the server
set -euo pipefail
MODEL=${MODEL:-models/tiny}
PORT=8123  # fixed
SPEC='@SPEC@'
OUT="$PWD/hidden states"
python -m vllm.entrypoints.cli.main serve "$MODEL" --speculative_config "$SPEC" \\
    --host 127.0.0.1 --port $PORT > server.log 2>&1 &
SERVER_PID=$!
until curl -sf http://127.0.0.1:${PORT}/health >/dev/null; do
  kill -0 $SERVER_PID 2>/dev/null || { echo "server died"; exit 1; }
  sleep 1
done
cat <<EOF
python -m vllm.entrypoints.cli.main serve not/this/one
EOF
speculators generate-offline-data --model "$MODEL" --endpoint "http://127.0.0.1:$PORT/v1" \\
  --preprocessed-data data/prepared --output "$OUT" --concurrency 2
kill $SERVER_PID
""".replace("@SPEC@", json.dumps(SPEC))

LAUNCH_PY = """import json, os, subprocess, sys, time, urllib.request

MODEL = os.environ.get("MODEL", "models/tiny")
PORT = 8124
SPEC = json.dumps(@SPEC@)


def main() -> None:
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", MODEL, "--speculative_config", SPEC]
    command += ["--port", str(PORT)]
    server = subprocess.Popen(command)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health")
                break
            except OSError:
                time.sleep(1)
        subprocess.run(["speculators", "generate-offline-data", "--model", MODEL, "--endpoint",
                        f"http://127.0.0.1:{PORT}/v1", "--preprocessed-data", "data/prepared",
                        "--output", "hs"], check=True)
    finally:
        server.terminate()


main()
""".replace("@SPEC@", repr(SPEC))


def work(tmp_path: Path) -> Path:
    """A workdir with the script, the launcher, a model folder with a config.json and a dataset folder."""
    folder = tmp_path / "work"
    (folder / "models" / "tiny").mkdir(parents=True)
    (folder / "models" / "tiny" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 8}))
    (folder / "data" / "prepared").mkdir(parents=True)
    (folder / "run.sh").write_text(RUN_SH)
    (folder / "launch.py").write_text(LAUNCH_PY)
    return folder


def test_a_shell_script_is_read_as_the_shell_splits_it(tmp_path: Path) -> None:
    folder = work(tmp_path)
    wrapped = read_wrapper(LocalHost(), ["bash", "run.sh"], str(folder), {})
    assert wrapped is not None and wrapped.read_through, wrapped
    assert wrapped.server == ["python", "-m", "vllm.entrypoints.cli.main", "serve", "models/tiny",
                              "--speculative_config", json.dumps(SPEC), "--host", "127.0.0.1", "--port", "8123"]
    assert wrapped.client == ["speculators", "generate-offline-data", "--model", "models/tiny", "--endpoint",
                              "http://127.0.0.1:8123/v1", "--preprocessed-data", "data/prepared", "--output",
                              f"{folder}/hidden states", "--concurrency", "2"]
    # the job's env wins over the script's default; ./run.sh and sbatch run.sh are the same script
    for command in (["./run.sh"], ["sbatch", "--time=1:00:00", "run.sh"], ["bash", "-x", "run.sh"]):
        again = read_wrapper(LocalHost(), command, str(folder), {"MODEL": "/elsewhere/m"})
        assert again is not None and again.server and again.server[4] == "/elsewhere/m", command
    assert with_python(wrapped.server, "/env/bin/python")[0] == "/env/bin/python"  # type: ignore[index]


def test_what_the_shell_would_do_with_quotes_defaults_and_separators() -> None:
    text = ("A=1; B=\"$A two\" ; export C=${D:-$A}\n"
            "echo '$A' \"$B\" $B ${C} ${E:+x} # a comment $A\n"
            "nohup env X=1 vllm serve m --port 9 2>&1 | tee log && echo ok\n")
    words = [c.words for c in script_commands(text, {})]
    assert words == [("echo", "$A", "1 two", "1", "two", "1"), ("nohup", "env", "X=1", "vllm", "serve", "m",
                                                                "--port", "9"), ("tee", "log"), ("echo", "ok")]


def test_a_variable_the_script_never_assigns_is_named_not_guessed(tmp_path: Path) -> None:
    folder = work(tmp_path)
    (folder / "run.sh").write_text("vllm serve $MODEL_DIR --port 8000 &\nspeculators generate-offline-data "
                                   "--model $(cat model.txt) --endpoint http://127.0.0.1:8000/v1\n")
    wrapped = read_wrapper(LocalHost(), ["bash", "run.sh"], str(folder), {})
    assert wrapped is not None and not wrapped.read_through
    assert wrapped.unseen == ["the value of $MODEL_DIR in the server command (line 1)",
                              "the value of $(...) in the client command (line 2)"]
    make = read_wrapper(LocalHost(), ["make", "extract"], str(folder), {})
    assert make is not None and make.unseen and "Makefiles" in make.unseen[0]
    (folder / "plain.sh").write_text("python extract.py --out x.pt\n")  # an in-process job: nothing to see
    plain = read_wrapper(LocalHost(), ["bash", "plain.sh"], str(folder), {})
    assert plain is not None and plain.server is None and plain.unseen == []


def test_a_python_launcher_is_read_from_its_syntax_tree(tmp_path: Path) -> None:
    folder = work(tmp_path)
    wrapped = read_wrapper(LocalHost(), ["python", "launch.py"], str(folder), {})
    assert wrapped is not None and wrapped.read_through and wrapped.kind == "python", wrapped
    assert wrapped.server is not None and wrapped.server[:5] == ["python", "-m", "vllm.entrypoints.cli.main",
                                                                 "serve", "models/tiny"]
    assert json.loads(wrapped.server[6]) == SPEC and wrapped.server[-1] == "8124"
    assert wrapped.client is not None and wrapped.client[-1] == "hs"
    (folder / "extract.py").write_text("import subprocess\nsubprocess.run(['ls'])\n")  # starts no server
    assert read_wrapper(LocalHost(), ["python", "extract.py"], str(folder), {}) is None


def test_medics_own_check_of_a_wrapped_job_needs_no_validate(tmp_path: Path) -> None:
    """Today `bash run.sh` names no output, no model, no layer ids: medic could not check it. Read through, the
    client's output folder, the model and the server's layer ids make the speculators check."""
    folder = work(tmp_path)
    target = Target(python=sys.executable, workdir=str(folder), command=["bash", "run.sh"])
    assert isinstance(builtin_check(LocalHost(), sys.executable, target.command, str(folder)), str)
    wrapped = read_wrapper(LocalHost(), target.command, str(folder), {})
    assert wrapped is not None
    seen = seen_through(target, {"preflight": {"wrapped": wrapped.as_dict()}})  # type: ignore[typeddict-item]
    assert seen.server_command == wrapped.server and seen.command == wrapped.client
    check = builtin_check(LocalHost(), sys.executable, seen.command, str(folder),
                          server_command=seen.server_command)
    assert not isinstance(check, str), check
    assert check.output == f"{folder}/hidden states" and check.model == f"{folder}/models/tiny"
    assert check.argv[check.argv.index("--layers") + 1] == "2,4,5,8"
    # a job given with --server is left as given
    given = target.model_copy(update={"server_command": ["vllm", "serve", "x"]})
    assert seen_through(given, {"preflight": {"wrapped": wrapped.as_dict()}}) is given  # type: ignore[typeddict-item]


def test_the_no_output_message_reads_as_a_sentence_and_names_only_options_medic_run_has(tmp_path: Path) -> None:
    said = builtin_check(LocalHost(), sys.executable, ["bash", "run.sh"], str(tmp_path))
    assert isinstance(said, str)
    assert " no the " not in said and "--model-dir" not in said, said
    options = {f"--{name.replace('_', '-')}" for name in inspect.signature(medic_run).parameters}
    named = set(re.findall(r"--[a-z][a-z-]+", said))
    assert named and named <= options, (named - options, said)


LOG = b"""waiting for the server on 8123
/usr/bin/python3: Error while finding module specification for 'vllm.entrypoints.cli.main' \
(ModuleNotFoundError: No module named 'vllm')
server died
"""


def test_the_root_cause_is_the_interpreters_first_fatal_line_and_says_which_python_ran() -> None:
    fault = fault_from_log(LOG)
    assert fault.exc_type == "ModuleNotFoundError", fault.summary  # not "NoTraceback: server died"
    assert fault.message.startswith("/usr/bin/python3: Error while finding module specification")
    assert ran_instead(fault, "/lab/venv/bin/python") == (
        "/usr/bin/python3 ran it, a python that is not the target env's: /lab/venv/bin/python was meant")
    assert ran_instead(fault, "/usr/bin/python3") is None


def test_the_job_runs_with_the_target_env_activated(host: Host, tmp_path: Path) -> None:
    """A wrapper's own `python` is the target env's: its bin folder first on PATH, VIRTUAL_ENV set, as `source
    bin/activate` would, on this machine and over SSH; the job's env still wins for what it sets itself."""
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "job.sh").write_text('python -c "import sys; print(sys.prefix)"\necho "venv=$VIRTUAL_ENV x=$X"\n')
    python = str(venv / "bin" / "python")
    config = SessionConfig(session_id="w", target=Target(python=python, workdir=str(folder),
                                                         command=["bash", "job.sh"], env={"X": "1"}))
    env, unset = job_environment(LauncherDeps(host, config, lambda *_: None), {})  # type: ignore[arg-type]
    assert env["PATH"].split(":")[0] == str(venv / "bin") and env["VIRTUAL_ENV"] == str(venv) and not unset
    run = runs.launch(host, ["bash", "job.sh"], run_dir=str(tmp_path / "runs"), cwd=str(folder), env=env)
    deadline = time.monotonic() + 60
    while not host.exists(run.exit) and time.monotonic() < deadline:
        time.sleep(0.2)
    log = host.read_bytes(run.log).decode().split()
    assert log == [str(venv), f"venv={venv}", "x=1"], log


@pytest.mark.parametrize("python", ["/usr/bin/python3"])
def test_a_python_that_is_no_env_is_not_activated(python: str) -> None:
    config = SessionConfig(session_id="w", target=Target(python=python, workdir="/tmp", command=["x"]))
    env, _ = job_environment(LauncherDeps(LocalHost(), config, lambda *_: None), {})  # type: ignore[arg-type]
    assert "VIRTUAL_ENV" not in env and "PATH" not in env


def test_the_report_says_what_medic_could_not_see_and_what_the_server_form_would_save(tmp_path: Path) -> None:
    from agent.nodes.preflight import cannot_see
    from agent.record.report import render_report

    folder = work(tmp_path)
    (folder / "run.sh").write_text("vllm serve $M --port 8000 &\nspeculators generate-offline-data --model m\n")
    wrapped = read_wrapper(LocalHost(), ["bash", "run.sh"], str(folder), {})
    assert wrapped is not None and wrapped.unseen == ["the value of $M in the server command (line 1)"]
    config = SessionConfig(session_id="w", target=Target(python=sys.executable, workdir=str(folder),
                                                         command=["bash", "run.sh"]))
    state = {"preflight": {"warnings": [cannot_see(wrapped)], "wrapped": wrapped.as_dict()}}
    report = render_report(state, config)  # type: ignore[arg-type]
    said = next(line for line in report.splitlines() if line.startswith("- warning:"))
    assert "could not read through" in said and "$M in the server command" in said
    assert "--server" in said and "saves a server load" in said and "without --validate" in said
