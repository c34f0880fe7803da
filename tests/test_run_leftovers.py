"""No process of a run outlives the run's end as medic reports it (tools/runs.py): not a child that ignores
SIGTERM, not one in a process group of its own, not one that called setsid — on both hosts, through the
wrapper, status(), stop_all() and a whole session."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes.report import end_runs
from agent.session import make_deps, run_session
from tests.fixtures_fake import MakeFake
from tests.test_host import process_alive, wait_until
from tools import runs
from tools.host import Host, LocalHost
from tools.runs import KILLED_EXIT_CODE, Run, launch, status

# three ways to stay behind: ignore TERM in the run's group, a group of one's own, a session of one's own
LEFTOVERS = (
    "(trap '' TERM; exec sleep 60) & echo $! > {d}/stubborn; "
    "{py} -c 'import os, signal, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "time.sleep(60)' & echo $! > {d}/grouped; "
    "setsid sleep 60 & echo $! > {d}/escaped; "
)


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """One second between TERM and KILL (five in use): the same code path, a shorter wait."""
    monkeypatch.setattr(runs, "REAP_GRACE", 1.0)


def leftovers(folder: Path) -> str:
    return LEFTOVERS.format(d=folder, py=sys.executable)


def run_processes(run: Run) -> list[int]:
    """Live processes of the run, read from /proc: in its group or session, or carrying its marker."""
    wrapper = Path(run.pid).read_text().strip()
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if fields[0] != "Z" and (wrapper in (fields[2], fields[3]) or f"MEDIC_RUN={run.dir}".encode() in environ):
            found.append(int(stat.parent.name))
    return found


def pids(folder: Path, *names: str) -> list[int]:
    assert wait_until(lambda: all((folder / n).exists() and (folder / n).read_text().strip() for n in names))
    return [int((folder / name).read_text()) for name in names]


def wait_exited(host: Host, run: Run, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while status(host, run).state == "running":
        assert time.monotonic() < deadline, f"run {run.id} still running after {seconds}s"
        time.sleep(0.1)


def test_a_crashed_run_leaves_no_process(host: Host, tmp_path: Path) -> None:
    run = launch(host, leftovers(tmp_path) + "exit 3", run_dir=str(tmp_path / "runs"))
    children = pids(tmp_path, "stubborn", "grouped", "escaped")
    wait_exited(host, run)
    final = status(host, run)
    assert (final.state, final.exit_code) == ("exited", 3)
    assert not [pid for pid in children if process_alive(pid)] and run_processes(run) == []


def test_a_run_whose_wrapper_was_killed_leaves_no_process(host: Host, tmp_path: Path) -> None:
    """As the OOM killer would: the wrapper and its group die, no exit code is written; a worker in another
    session lives on. status() says vanished only once nothing of the run is left."""
    run = launch(host, leftovers(tmp_path) + "wait", run_dir=str(tmp_path / "runs"))
    children = pids(tmp_path, "stubborn", "grouped", "escaped")
    wrapper = int(Path(run.pid).read_text())
    host.run(f"kill -KILL -{wrapper}")
    assert wait_until(lambda: not process_alive(wrapper))
    # the group's SIGKILL lands on each member in its own time (a loaded machine shows it): while one still runs,
    # the run is running; then status() ends the worker in the other session and says vanished
    assert wait_until(lambda: status(host, run).state == "vanished", seconds=30.0)
    assert not [pid for pid in children if process_alive(pid)] and run_processes(run) == []


def test_the_session_end_stops_what_is_left_of_its_runs(host: Host, tmp_path: Path) -> None:
    """end_runs (the report node): one command ends every run of the session, stopped or still running."""
    first = launch(host, leftovers(tmp_path) + "exit 1", run_dir=str(tmp_path / "L1"))
    wait_exited(host, first)
    (tmp_path / "second").mkdir()
    second = launch(host, leftovers(tmp_path / "second") + "sleep 60", run_dir=str(tmp_path / "L2"))
    pids(tmp_path / "second", "stubborn", "grouped", "escaped")
    deps = make_deps_for(host, tmp_path)
    try:
        end_runs({"launches": [{"n": 1, "kind": "target", "launcher": "detached", "run_dir": first.dir},
                               {"n": 2, "kind": "target", "launcher": "detached", "run_dir": second.dir}]}, deps)
    finally:
        deps.trace.close()
    assert run_processes(first) == [] and run_processes(second) == []
    assert status(host, second).exit_code in (143, KILLED_EXIT_CODE)


def make_deps_for(host: Host, tmp_path: Path) -> Deps:
    config = SessionConfig(session_id="ends", traces_dir=str(tmp_path / "traces"),
                           target=Target(python=sys.executable, workdir=str(tmp_path), command=["true"]))
    return make_deps(config, host=host)


DRIVER = """\
import subprocess, sys
subprocess.Popen(["sh", "-c", "trap '' TERM; echo $$ > stubborn; exec sleep 60"])
subprocess.Popen(["sh", "-c", "echo $$ > escaped; exec sleep 60"], start_new_session=True)
import time; time.sleep(1)
raise SystemExit("the driver failed")
"""


def test_after_a_session_nothing_of_its_runs_is_alive(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", session_id="leftover")
    (fake.work / "driver.py").write_text(DRIVER)
    outcome, _ = run_session(fake.config, deps=make_deps(fake.config, host=LocalHost()))
    assert outcome != "verified"
    children = [int((fake.work / name).read_text()) for name in ("stubborn", "escaped")]
    ended = fake.events("run_end")
    assert ended and all(e["outcome"] == "crashed" for e in ended)
    assert not [pid for pid in children if process_alive(pid)]
    assert all(run_processes(Run.in_dir(str(folder))) == [] for folder in fake.run_dirs())
