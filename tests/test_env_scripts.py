"""A command whose first word is a program of the target env (tools/env_scripts.py, agent/job.py in_target_env).

The target env is the fake target's venv (tests/fixtures_fake.py), not activated, into which real pip installs a
tiny wheel with two console scripts: ``fakecli`` (runs the drifted fakecaller and writes out.txt) and
``fakecheck`` (checks it). The job folder is the test's tmp_path, outside the repository. The PATH medic and the
job run with has a decoy of each that prints DECOY and fails: the session must run the env's scripts, for the
job and the validator, on this machine and over the loopback sshd. A program nobody has is a CommandNotFound
fault that names where it was looked up, and the session ends ``not_found`` (exit 11) with no patch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from agent.config import Target
from agent.job import in_target_env
from agent.outcomes import exit_code
from agent.readers.replay import replay
from agent.repair.scan_platform import server_modules
from agent.repair.types import RepairContext
from agent.session import run_session
from tests.fixtures_fake import FIXED, Fake, MakeFake
from tools import env_scripts, runs
from tools.host import LocalHost
from tools.logs import clean_lines

CLI = """\
import pathlib, sys

def main():
    print(f"fakecli ran as {sys.argv[0]} under {sys.executable}", flush=True)
    import fakecaller
    pathlib.Path(sys.argv[1]).write_text(fakecaller.run(1))
    return 0

def check():
    print(f"fakecheck ran as {sys.argv[0]}", flush=True)
    return 0 if pathlib.Path(sys.argv[1]).read_text() == "1:a" else 1

def serve():
    import functools, http.server
    print(f"fakeserve ran as {sys.argv[0]}", flush=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="www")
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
"""
ENTRY_POINTS = ("[console_scripts]\nfakecli = fakecli_pkg:main\nfakecheck = fakecli_pkg:check\n"
                "fakeserve = fakecli_pkg:serve\n")
DECOY = "#!/bin/sh\necho \"DECOY $0 $*\"\nexit 3\n"


def wheel(folder: Path) -> Path:
    """fakecli 1.0 as a wheel: a package and the entry points that pip turns into scripts in the env's bin."""
    path = folder / "fakecli-1.0-py3-none-any.whl"
    info = "fakecli-1.0.dist-info"
    files = {"fakecli_pkg/__init__.py": CLI, f"{info}/entry_points.txt": ENTRY_POINTS,
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: fakecli\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            zf.writestr(name, text)
    return path


def with_scripts(fake: Fake) -> Fake:
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(fake.python), "install", "--no-index",
                                "--no-deps", "--no-cache-dir", "-q", str(wheel(fake.root))],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert (fake.python.parent / "fakecli").exists()
    return fake


def decoys(folder: Path) -> str:
    """A folder of programs named like the env's that fail loudly: first on the PATH they are given."""
    folder.mkdir(exist_ok=True)
    for name in ("fakecli", "fakecheck", "fakeserve"):
        (folder / name).write_text(DECOY)
        (folder / name).chmod(0o755)
    return str(folder)


@pytest.fixture
def scripted(make_fake: MakeFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    """The fake target with fakecli installed, its command and validator typed as console scripts, and the decoys
    first on this process's PATH (the host PATH a local job inherits)."""
    fake = with_scripts(make_fake(mode="unattended", save=False))
    monkeypatch.setenv("PATH", f"{decoys(tmp_path / 'decoys')}:{os.environ['PATH']}")
    return fake


def configured(fake: Fake, command: list[str], validate: list[str], **target: object) -> Fake:
    fake.save(target=fake.config.target.model_copy(update={"command": command, "validate_command": validate,
                                                           **target}))
    return fake


def launches(fake: Fake) -> list[dict[str, object]]:
    return fake.events("launch")


def assert_ran_the_envs_scripts(fake: Fake) -> None:
    bin_dir = fake.python.parent
    for launch in launches(fake):
        assert launch["command"][0] == str(bin_dir / "fakecli")  # type: ignore[index]
        assert launch["script"] == {"given": "fakecli", "ran": str(bin_dir / "fakecli"), "distribution": "fakecli 1.0"}
    logs = [(run / "log").read_text() for run in fake.run_dirs()]
    assert logs and all("DECOY" not in log for log in logs)
    assert f"fakecli ran as {bin_dir / 'fakecli'} under {fake.python}" in logs[-1]
    checked = fake.events("validate")[-1]
    assert checked["verified"] and checked["script"]["ran"] == str(bin_dir / "fakecheck")


def test_a_console_script_of_the_target_env_runs_there_not_the_host_paths(scripted: Fake) -> None:
    fake = configured(scripted, ["fakecli", "out.txt"], ["fakecheck", "out.txt"])
    outcome, state = run_session(fake.config)
    assert outcome == "verified", state.get("outcome_detail")
    assert fake.caller.read_text() == FIXED  # the drift in the code the script reaches was repaired on the way
    assert len(launches(fake)) == 2
    assert_ran_the_envs_scripts(fake)


@pytest.mark.ssh
def test_over_ssh_the_target_envs_script_runs_too(sshd, make_fake: MakeFake, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_SSH_CONFIG", sshd.config_path)
    fake = with_scripts(make_fake(session_id="ssh-scripts", mode="unattended", host=sshd.alias, save=False))
    # over SSH the job's PATH is the remote login's: the decoys go first on it through the job's env
    path = f"{decoys(tmp_path / 'remote-decoys')}:/usr/local/bin:/usr/bin:/bin"
    fake = configured(fake, ["fakecli", "out.txt"], ["fakecheck", "out.txt"], env={"PATH": path})
    outcome, state = run_session(fake.config)
    assert outcome == "verified", state.get("outcome_detail")
    assert json.loads(fake.trace_path.read_text().splitlines()[0])["host"] != "local"
    assert_ran_the_envs_scripts(fake)


def test_a_program_nobody_has_is_a_fault_of_its_own_that_says_where_it_was_looked_up(scripted: Fake) -> None:
    fake = configured(scripted, ["nosuch-extractor", "out.txt"], ["fakecheck", "out.txt"])
    outcome, state = run_session(fake.config)
    assert outcome == "not_found" and exit_code(outcome) == 11
    fault = fake.events("fault")[-1]
    assert state["faults"][-1]["exc_type"] == "CommandNotFound" and "NoTraceback" not in json.dumps(state["faults"])
    message = state["faults"][-1]["message"]
    assert "`nosuch-extractor` was not found" in message
    assert str(fake.python.parent) in message and "entry point" in message  # the target env was searched
    assert os.environ["PATH"] in message  # and the PATH the job ran with, decoys first
    assert "nosuch-extractor" in fault["summary"] and not fake.events("applied") and not state.get("patches")
    assert len(launches(fake)) == 1 and "nosuch-extractor" in (state.get("outcome_detail") or "")
    assert replay(fake.trace_path).first_divergence is None  # today's code re-decides it the same way


def test_a_validator_that_is_not_found_ends_the_same_way(scripted: Fake) -> None:
    fake = configured(scripted, ["fakecli", "out.txt"], ["nosuch-checker", "out.txt"])
    fake.caller.write_text(FIXED)
    outcome, state = run_session(fake.config)
    assert outcome == "not_found", state.get("outcome_detail")
    assert state["faults"][-1]["stage"] == "validate" and state["faults"][-1]["exc_type"] == "CommandNotFound"
    assert "`nosuch-checker` was not found" in state["faults"][-1]["message"]
    assert str(fake.python.parent) in state["faults"][-1]["message"]


def test_a_server_typed_as_the_envs_console_script_runs_the_envs(scripted: Fake) -> None:
    (scripted.work / "www").mkdir()
    (scripted.work / "www" / "health").write_text("ok\n")  # what the server's /health answers
    fake = configured(scripted, ["fakecli", "out.txt"], ["fakecheck", "out.txt"],
                      server_command=["fakeserve", "{port}"])
    fake.caller.write_text(FIXED)
    outcome, state = run_session(fake.config)
    assert outcome == "verified", state.get("outcome_detail")
    started = next(e for e in fake.events("server") if e["event"] == "started")
    served = str(fake.python.parent / "fakeserve")
    assert started["command"][0] == served and started["script"]["ran"] == served
    log = (Path(started["run_dir"]) / "log").read_text()
    assert f"fakeserve ran as {served}" in log and "DECOY" not in log
    assert_ran_the_envs_scripts(fake)


def test_a_server_that_is_not_found_ends_not_found_on_the_server_side(scripted: Fake) -> None:
    fake = configured(scripted, ["fakecli", "out.txt"], ["fakecheck", "out.txt"],
                      server_command=["nosuch-server", "{port}"])
    outcome, state = run_session(fake.config)
    assert outcome == "not_found", state.get("outcome_detail")
    fault = state["faults"][-1]
    assert fault["exc_type"] == "CommandNotFound" and fault["side"] == "server"
    assert "`nosuch-server` was not found" in fault["message"] and str(fake.python.parent) in fault["message"]
    assert "command.sh" not in fault["message"]  # the shell's own words, not medic's wrapper
    assert not state.get("patches")


def test_an_entry_point_whose_script_is_gone_runs_through_the_target_python(make_fake: MakeFake) -> None:
    fake = with_scripts(make_fake(save=False))
    (fake.python.parent / "fakecli").unlink()  # the distribution still declares it
    fake.caller.write_text(FIXED)
    target = Target(python=str(fake.python), workdir=str(fake.work), command=["fakecli", "out.txt"])
    command, note = in_target_env(LocalHost(), target.command, target)
    assert command[0] == str(fake.python) and note["script"]["given"] == "fakecli"
    done = subprocess.run(command, cwd=fake.work, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"fakecli ran as fakecli under {fake.python}" in done.stdout  # argv[0] as its script would set it
    assert (fake.work / "out.txt").read_text() == "1:a"
    # a word the env does not have, and a path, are left to the PATH and the user
    for words in (["ls", "-l"], ["/bin/echo", "x"]):
        assert in_target_env(LocalHost(), words, target) == (words, {})


@pytest.mark.parametrize("command", [
    ["nosuchprog", "x"],  # dash: "command.sh: 1: nosuchprog: not found"
    ["env", "-u", "FOO", "nosuchprog"],  # what medic's unset remedies wrap a command in: env's own words
    ["bash", "-c", "nosuchprog"],  # "bash: line 1: nosuchprog: command not found"
    ["nohup", "nosuchprog"],
])
def test_the_shells_own_words_and_the_path_on_exit_127_name_the_program(command: list[str], tmp_path: Path) -> None:
    host = LocalHost()
    run = runs.launch(host, command, run_dir=str(tmp_path / "runs"), cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"})
    while runs.status(host, run).state == "running":
        time.sleep(0.05)
    assert runs.status(host, run).exit_code == env_scripts.NOT_FOUND_EXIT
    missing = env_scripts.not_found([line.text for line in clean_lines(Path(run.log).read_bytes())])
    assert missing is not None and missing.name == "nosuchprog" and missing.path == "/usr/bin:/bin"


def test_an_exit_127_alone_or_the_words_alone_are_not_a_missing_program(tmp_path: Path) -> None:
    host = LocalHost()
    for command in (["sh", "-c", "echo done; exit 127"], ["sh", "-c", "echo 'sh: 1: y: not found'"]):
        run = runs.launch(host, command, run_dir=str(tmp_path / "runs"))
        while runs.status(host, run).state == "running":
            time.sleep(0.05)
        lines = [line.text for line in clean_lines(Path(run.log).read_bytes())]
        assert lines and env_scripts.not_found(lines) is None


def test_a_server_typed_as_a_console_script_has_its_module_scanned(make_fake: MakeFake) -> None:
    """`vllm serve …` as typed: the scan reads the module the env's console script starts, as for `-m module`."""
    fake = with_scripts(make_fake(save=False))
    ctx = RepairContext(host=LocalHost(), python=str(fake.python), roots=(str(fake.site),),
                        server_command=("fakecli", "serve", "--port", "{port}"))
    assert server_modules(ctx) == [str(fake.site / "fakecli_pkg" / "__init__.py")]
    ctx = RepairContext(host=LocalHost(), python=str(fake.python), roots=(str(fake.site),),
                        server_command=("nosuch-server", "serve"))
    assert server_modules(ctx) == []
