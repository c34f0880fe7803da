"""The product's promise on the real lab: pristine speculators 0.3.0 on vLLM 0.16.0 -> verified output,
unattended, with no LLM, the scan off (every fault found by a run); then a second session on the fixed lab,
with a canary and the target started beside it, launches the target once and changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lab.build import RUN_ENV, LabPaths
from tests.lab_cascade import assert_the_cascade

pytestmark = pytest.mark.lab

MEDIC = [sys.executable, "-c", "from agent.cli.main import main; main()"]
def medic(args: list[str], home: Path, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEDIC_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([*MEDIC, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def events(trace: Path) -> list[dict]:
    lines = trace.read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


def speculators_digest(lab: LabPaths) -> dict[str, str]:
    root = lab.site_packages() / "speculators"
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.py"))}


def test_pristine_lab_to_verified_output_then_a_second_run_changes_nothing(pristine_lab: LabPaths, tmp_path: Path):
    """Without the scan every fault costs one launch (worker tracebacks too); a second session on the fixed lab
    launches the target once (beside its canary) and changes nothing. (The same lab with the scan, as
    `medic run --lab` runs it, is test_panel_terminal.py's session, held to the same cascade.)"""
    lab = pristine_lab
    traces = tmp_path / "traces"
    try:
        first = medic(["run", "--session", "e2e-1", "--traces", str(traces), "--lab", str(lab.root), "--no-scan"],
                      tmp_path)
        assert first.returncode == 0, first.stderr[-3000:]

        check = medic(["lab", "check", str(lab.output), "--path", str(lab.root)], tmp_path, timeout=600)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "VERIFIED" in check.stdout
        report = (tmp_path / "sessions" / "e2e-1" / "report.md").read_text()
        assert_the_cascade(events(traces / "e2e-1.jsonl"), report, "no-scan")

        fixed = speculators_digest(lab)
        # the second session names its model folder: a canary of it runs first, and the target starts beside it
        # (a CPU job whose canary writes apart): one target launch, adopted, not started twice
        lab.output.unlink()
        env = [f"--env={k}={v}" for k, v in RUN_ENV.items()]
        second = medic(["run", "--session", "e2e-2", "--traces", str(traces), "--python", str(lab.python),
                        "--workdir", str(lab.work), "--canary-model", str(lab.model()), *env,
                        "--validate", shlex.join(lab.validate_command()), "--", *lab.command()], tmp_path)
        assert second.returncode == 0, second.stderr[-3000:]
        again = events(traces / "e2e-2.jsonl")
        launches = [e["data"] for e in again if e["kind"] == "launch"]
        assert [d["kind"] for d in launches] == ["canary", "target"]
        assert launches[1]["beside"] is True and launches[1]["run_dir"] == launches[0]["target_beside"]
        assert not [e for e in again if e["kind"] in ("fault", "applied")]
        assert speculators_digest(lab) == fixed
        assert (lab.work / ".medic" / "canary-output" / lab.output.name).exists()  # the canary's, apart
        check = medic(["lab", "check", str(lab.output), "--path", str(lab.root)], tmp_path, timeout=600)
        assert check.returncode == 0 and "VERIFIED" in check.stdout, check.stdout + check.stderr
    finally:
        medic(["lab", "reset", "--path", str(lab.root)], tmp_path, timeout=600)


def test_revert_undoes_every_patch_of_a_session_byte_for_byte(pristine_lab: LabPaths, tmp_path: Path):
    """A session stopped by its budget keeps its patches (the first crash's: without the scan, which finds the
    whole cascade before any launch now); `medic revert` puts every file back."""
    lab = pristine_lab
    before = speculators_digest(lab)
    try:
        run = medic(["run", "--session", "rv", "--traces", str(tmp_path), "--lab", str(lab.root), "--no-scan",
                     "--max-launches", "1"], tmp_path)
        assert run.returncode == 3, run.stderr[-2000:]  # budget spent
        assert speculators_digest(lab) != before
        undo = medic(["revert", "rv"], tmp_path)
        assert undo.returncode == 0, undo.stderr
        assert speculators_digest(lab) == before
    finally:
        medic(["lab", "reset", "--path", str(lab.root)], tmp_path, timeout=600)
