"""Issue 14, "as typed": medic the way a stranger uses it, end to end.

medic comes from its built wheel, in a fresh venv (tests/test_wheel.py's ``installed`` fixture). The job is a
folder of the user's own outside the repository: its own driver (speculators' ``VllmHiddenStatesGenerator``
behind other argument names than the lab's), its own tiny random Llama (another size than the lab's), its own
validator. From that folder, with relative paths, exactly as typed:

    medic run --python LAB_PYTHON --workdir . --validate "python check_out.py out.pt" --session as-typed \
              -- python driver.py ./model -o out.pt

then ``medic replay``, ``medic postmortem`` and ``medic revert`` on what it left. The target env is a private
hard-linked copy of the lab (pristine speculators 0.3.0 on vLLM 0.16.0), so no other test can disturb it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from lab.build import RUN_ENV, LabPaths
from tests.test_wheel import REPO, installed  # noqa: F401  (the module-scoped wheel-venv fixture, reused)

pytestmark = pytest.mark.lab

DATA = Path(__file__).parent / "data" / "as_typed"
SESSION = "as-typed"
JOB_COMMAND = ["python", "driver.py", "./model", "-o", "out.pt"]
VALIDATE = "python check_out.py out.pt"


def sha256s(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def watched_files(lab: LabPaths, job: Path) -> list[Path]:
    """What medic may patch here: the fixable package in the target env, and the job's own scripts."""
    return [*sorted((lab.site_packages() / "speculators").rglob("*.py")), job / "driver.py", job / "check_out.py"]


def events(trace: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = trace.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def leftovers(*markers: str) -> list[str]:
    """Processes (not this one) whose command line or environment names one of ``markers``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if any(m.encode() in cmdline or m.encode() in environ for m in markers):
            found.append(f"{proc.name}: {cmdline.decode(errors='replace')[:200]}")
    return found


@pytest.fixture
def job(private_lab: LabPaths, tmp_path: Path) -> Path:
    """tmp_path/job: the user's driver, validator and model, nothing of medic's or the lab's."""
    folder = tmp_path / "job"
    folder.mkdir()
    for name in ("driver.py", "check_out.py"):
        (folder / name).write_bytes((DATA / name).read_bytes())
    made = subprocess.run([str(private_lab.python), str(DATA / "make_job_model.py"), str(folder / "model"),
                           str(REPO / "lab" / "target")], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**os.environ, **RUN_ENV})
    assert made.returncode == 0, made.stderr[-3000:]
    config = json.loads((folder / "model" / "config.json").read_text())
    lab_config = json.loads((private_lab.model("tiny") / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert (config["hidden_size"], config["num_hidden_layers"]) != (lab_config["hidden_size"],
                                                                    lab_config["num_hidden_layers"])
    return folder


def test_a_strangers_job_from_its_own_folder_to_verified_then_replay_postmortem_revert(
        installed: Path, private_lab: LabPaths, job: Path, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "medic-home"
    medic = str(installed / "bin" / "medic")
    repo_bin = str(REPO / ".venv" / "bin")
    path = ":".join([str(installed / "bin"), *(p for p in os.environ.get("PATH", "").split(":") if p != repo_bin)])
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **RUN_ENV, "PATH": path,
           "VIRTUAL_ENV": str(installed), "MEDIC_HOME": str(home), "COLUMNS": "200"}

    def typed(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([medic, *args], cwd=job, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    watched = watched_files(private_lab, job)
    pristine = sha256s(watched)
    late: list[str] = []  # checks that fail late, so that revert and the process check still run
    try:
        run = typed("run", "--python", str(private_lab.python), "--workdir", ".", "--validate", VALIDATE,
                    "--session", SESSION, "--", *JOB_COMMAND, timeout=1500)
        assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"

        # the trace went where the default says: ./traces of the folder medic was started in
        trace = job / "traces" / f"{SESSION}.jsonl"
        assert trace.is_file(), sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.jsonl"))
        assert not (REPO / "traces" / f"{SESSION}.jsonl").exists()
        header, recorded = events(trace)
        target = header["config"]["target"]
        assert target["workdir"] == str(job) and target["python"] == str(private_lab.python)
        assert target["command"] == JOB_COMMAND  # kept as typed; the run resolves it in the workdir

        # the scan read the relative driver: it followed its import into speculators and found the drift there
        scan_faults = [e["data"] for e in recorded if e["kind"] == "fault" and e["data"].get("stage") == "scan"]
        assert len(scan_faults) >= 5, [e["data"].get("summary") for e in recorded if e["kind"] in ("fault", "scan")]
        launches = [e["data"] for e in recorded if e["kind"] == "launch"]
        assert launches and all(launch["command"][0] == str(private_lab.python) for launch in launches)
        validated = [e["data"] for e in recorded if e["kind"] == "validate"]
        assert validated and validated[-1]["verified"] is True, validated
        assert recorded[-1]["kind"] == "exit" and recorded[-1]["data"]["outcome"] == "verified", recorded[-1]
        assert "verified" in run.stderr.lower()

        # VERIFIED by the job's own validator, run again here by hand
        assert (job / "out.pt").is_file()
        check = subprocess.run([str(private_lab.python), "check_out.py", "out.pt"], cwd=job, capture_output=True,
                               text=True, timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **RUN_ENV})
        assert check.returncode == 0 and "VERIFIED" in check.stdout, check.stdout + check.stderr[-2000:]

        applied = [e["data"] for e in recorded if e["kind"] == "applied"]
        patched = {f for a in applied for f in a.get("files") or []}
        assert applied and patched <= set(pristine), patched - set(pristine)
        assert sha256s(watched) != pristine

        replayed = typed("replay", f"traces/{SESSION}.jsonl")
        assert replayed.returncode == 0 and "no divergence" in replayed.stdout, replayed.stdout + replayed.stderr

        told = typed("postmortem", f"traces/{SESSION}.jsonl")
        assert told.returncode == 0, told.stderr[-2000:]
        assert "verified" in told.stdout
        if "driver.py" not in told.stdout:
            late.append("`medic postmortem` does not name the job's driver (driver.py, as the workdir has it):\n"
                        + told.stdout[:1500])
    finally:
        undone = typed("revert", SESSION)
    assert undone.returncode == 0, undone.stderr[-2000:]
    assert f"{len(applied)} patch(es)" in undone.stderr, undone.stderr
    after = sha256s(watched)
    assert after == pristine, [p for p in pristine if after[p] != pristine[p]]

    deadline = time.monotonic() + 30
    while (left := leftovers(str(job), str(home))) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, left
    assert not late, "\n".join(late)
