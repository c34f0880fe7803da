"""The embedded lab for the tests: built (or reused) once per session at the default root, never skipped.

``lab`` builds what is missing and fails the tests with the build's own message if that breaks;
``pristine_lab`` puts pristine speculators back before a test; ``reference_output`` writes extraction
outputs straight from transformers in the lab venv: one correct, one with wrong shapes, one with wrong values.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.build import DEFAULT_ROOT, RUN_ENV, LabBuilder, LabPaths
from tools.errors import LabError

LAB_SCRIPTS = Path(__file__).parent / "lab_scripts"


@dataclass(frozen=True)
class ReferenceOutputs:
    correct: Path
    wrong_shape: Path
    wrong_value: Path


@pytest.fixture(scope="session")
def lab() -> LabPaths:
    paths = LabPaths(DEFAULT_ROOT)
    try:
        LabBuilder(paths).build(("tiny",))
    except LabError as err:
        pytest.fail(f"the lab did not build: {err}", pytrace=False)
    return paths


@pytest.fixture
def pristine_lab(lab: LabPaths) -> LabPaths:
    LabBuilder(lab).reset()
    return lab


@pytest.fixture(scope="session")
def reference_output(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> ReferenceOutputs:
    folder = tmp_path_factory.mktemp("reference")
    proc = subprocess.run(
        [str(lab.python), str(LAB_SCRIPTS / "make_reference.py"), str(lab.model("tiny")), str(folder)],
        env={**os.environ, **RUN_ENV}, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        message = f"make_reference.py failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        pytest.fail(message, pytrace=False)
    return ReferenceOutputs(folder / "correct.pt", folder / "wrong_shape.pt", folder / "wrong_value.pt")
