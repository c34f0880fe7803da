"""The target started beside the canary (agent/launchers/beside.py), on real detached processes of this machine:
adopted only when nothing changed since it started, else stopped and forgotten; a medic killed between its ledger
line and its start never takes it for a launch of its own; the session's end stops it; the canary writes apart."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agent.config import SessionConfig, Target
from agent.launchers.base import LauncherDeps, LaunchPlan, write_ledger
from agent.launchers.beside import CANARY_NICE, canary_yields
from agent.launchers.detached import DetachedLauncher
from agent.state import SessionState
from tools import runs
from tools.canary import outputs_apart
from tools.host import LocalHost

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def launcher(tmp_path: Path) -> tuple[DetachedLauncher, list[tuple[str, dict[str, Any]]]]:
    said: list[tuple[str, dict[str, Any]]] = []
    target = Target(python=sys.executable, workdir=str(tmp_path), command=SLEEPER)
    config = SessionConfig(session_id="beside", target=target)
    return DetachedLauncher(LauncherDeps(LocalHost(), config, lambda kind, node, data: said.append(
        (kind, dict(data or {}))))), said


def plan(n: int, kind: str) -> LaunchPlan:
    return LaunchPlan(n=n, kind=kind, command=SLEEPER, started=0.0)


def kept(*ids: str) -> SessionState:
    return {"patches": [{"patch": {"id": i, "files": [], "host_steps": []}} for i in ids]}  # type: ignore[typeddict-item]


def state_of(host: LocalHost, folder: str) -> str:
    return runs.status(host, runs.Run.in_dir(folder)).state


def test_the_target_started_beside_is_adopted_when_nothing_changed(tmp_path: Path) -> None:
    medic, said = launcher(tmp_path)
    folder = medic.start_beside(kept("a"), plan(2, "target"))
    assert said == []  # not a launch of the session's yet
    assert medic.start_beside(kept("a"), plan(2, "target")) == folder  # a resumed launch node asks again
    update = medic.start(kept("a"), plan(2, "target"))
    assert update["run"]["run_dir"] == folder and said[-1][1]["beside"] is True
    assert state_of(medic.deps.host, folder) == "running"
    medic.end(update)  # type: ignore[arg-type]
    assert state_of(medic.deps.host, folder) != "running"


def test_a_change_since_it_started_stops_it_and_the_launch_starts_afresh(tmp_path: Path) -> None:
    medic, said = launcher(tmp_path)
    folder = medic.start_beside(kept("a"), plan(2, "target"))
    # a patch kept since (the canary failed and was repaired): the next launch of that number is the canary's
    update = medic.start(kept("a", "b"), plan(2, "canary"))
    assert update["run"]["run_dir"] != folder and not Path(folder).exists()
    assert "beside" not in said[-1][1] and "reattached" not in said[-1][1]
    medic.end(update)  # type: ignore[arg-type]


def test_a_ledger_line_written_before_its_start_is_not_a_launch(tmp_path: Path) -> None:
    medic, _ = launcher(tmp_path)
    cfg = medic.deps.config
    Path(cfg.host_dir, "launches").mkdir(parents=True)
    write_ledger(medic.deps.host, plan(2, "target").ledger(cfg), {"n": 2, "run": None, "beside": "0" * 16})
    update = medic.start(kept(), plan(2, "canary"))
    assert update["run"]["kind"] == "canary" and state_of(medic.deps.host, update["run"]["run_dir"]) == "running"
    medic.end(update)  # type: ignore[arg-type]


def test_the_sessions_end_stops_a_target_started_beside_its_canary(tmp_path: Path) -> None:
    medic, _ = launcher(tmp_path)
    folder = medic.start_beside(kept(), plan(2, "target"))
    canary = medic.start(kept(), plan(1, "canary"))
    canary["run"]["target_beside"] = folder
    medic.end(canary)  # type: ignore[arg-type]
    assert state_of(medic.deps.host, folder) != "running"


def test_the_canary_yields_the_cpu_to_the_target_beside_it(tmp_path: Path) -> None:
    medic, _ = launcher(tmp_path)
    canary = medic.start(kept(), plan(1, "canary"))
    folder = canary["run"]["run_dir"]
    canary_yields(medic.deps.host, folder)
    group = int(Path(folder, "pid").read_text())
    niceness = [int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
                for pid in _members(group)]
    assert niceness and all(n >= CANARY_NICE for n in niceness)
    medic.end(canary)  # type: ignore[arg-type]


def _members(group: int) -> list[int]:
    """The processes of a process group (the run's wrapper and the command under it)."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == group:
                out.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def test_the_canary_writes_and_reads_its_output_apart_from_the_jobs() -> None:
    command = ["python", "extract.py", "--model", "/c/model", "--out=out/hs.pt", "extra.pt"]
    validate = ["python", "check.py", "out/hs.pt", "--extra", "extra.pt"]
    moved = outputs_apart(command, validate, "/w/.medic/canary-output")
    assert moved is not None
    assert moved[0] == ["python", "extract.py", "--model", "/c/model", "--out=/w/.medic/canary-output/hs.pt",
                        "/w/.medic/canary-output/extra.pt"]
    assert moved[1] == ["python", "check.py", "/w/.medic/canary-output/hs.pt", "--extra",
                        "/w/.medic/canary-output/extra.pt"]
    # a validator that reads an output the command names otherwise would judge the job's file: not apart
    assert outputs_apart(command, ["python", "check.py"], "/w/o") is None
    assert outputs_apart(["python", "extract.py", "--model", "m"], None, "/w/o") is None  # names no output
    assert outputs_apart(["python", "x.py", "-o", "o.pt"], None, "/w/o") == (["python", "x.py", "-o", "/w/o/o.pt"],
                                                                              None, {"o.pt": "/w/o/o.pt"})
