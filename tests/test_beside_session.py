"""A real session whose target starts beside its canary (agent/launchers/beside.py), as a stranger runs one: a
job folder outside the repo, `--canary-model` naming the model folder the command names, `--validate`, the
lab's env as the target env (its torch builds the canary). The job is a small driver (it loads no model): what is
under test is medic's launches. Both ends the overlap can take: the canary answers first (its check passes, the
target started beside it is adopted), and the target exits 0 first (the canary's watch ends, the target is
adopted, and its own output is judged)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.nodes.watch import OVERTAKEN
from lab.build import LabPaths
from tests.fixtures_lab import lab  # noqa: F401
from tools import runs

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[1]
MEDIC = [sys.executable, "-c", "from agent.cli.main import main; main()"]
DRIVER = """import argparse, json, os, time
p = argparse.ArgumentParser(); p.add_argument("--model"); p.add_argument("--out"); a = p.parse_args()
canary = os.path.exists(os.path.join(a.model, "medic-canary.json"))
time.sleep(float(os.environ["CANARY_SLEEP" if canary else "TARGET_SLEEP"]))
config = json.load(open(os.path.join(a.model, "config.json")))
os.makedirs(os.path.dirname(a.out), exist_ok=True)
json.dump({"model": os.path.realpath(a.model), "hidden": config["hidden_size"]}, open(a.out, "w"))
"""
CHECK = """import json, os, sys
out, model = sys.argv[1], sys.argv[3]
said = json.load(open(out))
hidden = json.load(open(model + "/config.json"))["hidden_size"]
ok = said["model"] == os.path.realpath(model) and said["hidden"] == hidden
print("VERIFIED" if ok else f"NOT VERIFIED: {said}"); sys.exit(0 if ok else 1)
"""


def session(job: Path, paths: LabPaths, name: str, canary_sleep: float, target_sleep: float) -> list[dict]:
    # started in the job folder, as a stranger would; this checkout's medic, whichever one is installed
    env = {**os.environ, "MEDIC_HOME": str(job / "home"), "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([*MEDIC, "run", "--session", name, "--traces", str(job / "traces"), "--python",
                           str(paths.python), "--workdir", str(job), "--canary-model", "model",
                           f"--env=CANARY_SLEEP={canary_sleep}", f"--env=TARGET_SLEEP={target_sleep}",
                           "--validate", "python check.py out/result.pt --model model", "--",
                           "python", "job.py", "--model", "model", "--out", "out/result.pt"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=job, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [json.loads(line) for line in (job / "traces" / f"{name}.jsonl").read_text().splitlines()[1:]]


def test_the_target_started_beside_its_canary_is_adopted_whichever_ends_first(
        lab: LabPaths, tmp_path: Path) -> None:  # noqa: F811
    job = tmp_path / "job"
    job.mkdir()
    shutil.copytree(lab.model(), job / "model")
    (job / "job.py").write_text(DRIVER)
    (job / "check.py").write_text(CHECK)

    # the canary answers first: its check passes on its own output, apart from the job's
    first = session(job, lab, "b1", canary_sleep=0, target_sleep=8)
    launches = [e["data"] for e in first if e["kind"] == "launch"]
    assert [d["kind"] for d in launches] == ["canary", "target"]
    assert launches[1]["beside"] is True and launches[1]["run_dir"] == launches[0]["target_beside"]
    assert [e["kind"] for e in first].count("canary_passed") == 1
    canary_out = json.loads((job / ".medic" / "canary-output" / "result.pt").read_text())
    assert canary_out["model"] == os.path.realpath(job / ".medic" / "canary" / "model")
    assert json.loads((job / "out" / "result.pt").read_text())["model"] == os.path.realpath(job / "model")

    # the target exits 0 first: the canary is stopped, the target adopted and its own output judged
    (job / "out" / "result.pt").unlink()
    second = session(job, lab, "b2", canary_sleep=300, target_sleep=0)
    launches = [e["data"] for e in second if e["kind"] == "launch"]
    ends = [e["data"] for e in second if e["kind"] == "run_end"]
    assert [d["kind"] for d in launches] == ["canary", "target"] and launches[1]["beside"] is True
    assert ends[0]["outcome"] == OVERTAKEN and ends[1]["outcome"] == "exited"
    assert "canary_passed" not in [e["kind"] for e in second]
    assert [e["data"]["verified"] for e in second if e["kind"] == "validate"] == [True]
    canary_run = runs.Run.in_dir(launches[0]["run_dir"])
    assert Path(canary_run.exit).exists()  # stopped, and nothing of it left running
