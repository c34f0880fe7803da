"""First contact, bad input and stops (issue 25, item 8): a driver or a --validate script that is not there is
bad input (exit 2, one line, nothing created, nothing launched); a bench that needs a Slurm cluster says in one
line that there is none; a stop for a host step (exit 8) tells what to run and `medic resume`, never `approve`.
All on the real lab env and the real CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.record.view import View
from lab.build import RUN_ENV, LabBuilder, LabPaths
from tests.fixtures_fake import medic_cli
from tests.test_bad_target_leaves_nothing import assert_left_nothing

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("missing", ["driver", "validator"])
def test_a_script_that_is_not_there_is_bad_input_before_any_launch(private_lab: LabPaths, tmp_path: Path,
                                                                    missing: str) -> None:
    home, traces, lab = tmp_path / "medic-home", tmp_path / "traces", private_lab
    driver = "extract_typo.py" if missing == "driver" else "extract.py"
    check = "check_typo.py" if missing == "validator" else str(lab.checker)
    env_flags = [f"--env={k}={v}" for k, v in RUN_ENV.items()]
    before = sorted(lab.work.rglob("*"))
    done = medic_cli("run", "--mode", "unattended", "--session", f"gone-{missing}", "--traces", str(traces),
                     "--python", str(lab.python), "--workdir", str(lab.work), *env_flags,
                     "--validate", f"python {check} out/hidden_states.pt --model {lab.model()} --json",
                     "--", "python", driver, "--model", str(lab.model()), "--out", "out/hidden_states.pt",
                     env={"MEDIC_HOME": str(home)}, timeout=600)
    assert_left_nothing(done, home, traces, "does not exist")
    assert (driver if missing == "driver" else check) in done.stderr
    assert sorted(lab.work.rglob("*")) == before  # no run folder, no output: nothing launched


def test_shards_bench_without_slurm_says_so_in_one_line(lab: LabPaths, tmp_path: Path) -> None:
    """Slurm's commands are not on PATH (only this venv's python is): one line, exit 2, no traceback."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "shards.py"), "--lab", str(lab.root)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PATH": str(Path(sys.executable).parent)})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "Slurm" in lines[0] and "--scheduler detached" in lines[0] and "Traceback" not in done.stderr


def test_a_host_step_line_says_what_to_run_and_resume() -> None:
    line = View().describe("approval", {"patch_id": "p1", "session": "s1",
                                        "host_steps": ["apt-get install -y libtcmalloc-minimal4"]})
    assert line is not None and "apt-get install -y libtcmalloc-minimal4" in line and "medic resume s1" in line
    assert "approv" not in line
    patch_line = View().describe("approval", {"patch_id": "p2", "session": "s1", "host_steps": []})
    assert patch_line is not None and "medic approve s1" in patch_line  # a patch still waits for an approval


def test_a_stop_for_a_host_step_prints_only_the_step_and_resume(lab_0181: LabPaths, tmp_path: Path) -> None:
    """vLLM 0.18.1's CPU worker demands libtcmalloc in LD_PRELOAD; a host without it stops the session (exit 8)."""
    if os.environ.get("CI") and os.geteuid() == 0:  # CI's machine is ours: start without the library
        subprocess.run(["apt-get", "remove", "-y", "-qq", "libtcmalloc-minimal4"], capture_output=True, timeout=300)
    has = subprocess.run(["sh", "-c", "ldconfig -p | grep -F /libtcmalloc"], capture_output=True, text=True)
    if has.stdout.strip():
        pytest.skip("this host has libtcmalloc: there is no host step to stop for")
    root = tmp_path / "lab"
    subprocess.run(["cp", "-al", str(lab_0181.root), str(root)], check=True, timeout=300)
    LabBuilder(LabPaths(root)).reset()
    home = tmp_path / "medic-home"
    done = medic_cli("run", "--lab", str(root), "--no-canary", "--session", "hoststep", "--traces",
                     str(tmp_path / "traces"), env={"MEDIC_HOME": str(home)}, timeout=900)
    said = done.stdout + done.stderr
    assert done.returncode == 8, said[-3000:]
    assert "apt-get install -y libtcmalloc" in said and "medic resume hoststep" in said
    assert "medic approve" not in said and "waiting for approval" not in said, said[-3000:]
    listed = medic_cli("sessions", env={"MEDIC_HOME": str(home)})
    assert "medic resume" in listed.stdout and "patch" not in listed.stdout.split("hoststep", 1)[1], listed.stdout
