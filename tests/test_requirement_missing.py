"""A distribution the library declares is not installed at all, and the library's own code imports it (seen on
the GPU: vLLM 0.23.0's worker imports flashinfer, a declared requirement the kit had left out). The fault is the
environment's; the remedy the host step installing what the library declares, with the module's import as its
check; never a code patch, and nothing for a module no declared requirement names.

Real: a private copy of the lab whose vLLM declares cbor2, with cbor2 uninstalled, and the traceback its own
import writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.faults import fault_from_log
from agent.repair.derived_packages import requirement_missing
from agent.repair.types import RepairContext
from lab.build import LabPaths
from tests.fixtures_lab import lab  # noqa: F401
from tools.host import LocalHost

pytestmark = pytest.mark.lab


def test_a_declared_requirement_not_installed_is_installed_by_a_host_step(
        lab: LabPaths, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "lab"
    subprocess.run(["cp", "-al", str(lab.root), str(root)], check=True, timeout=300)
    paths = LabPaths(root)
    gone = subprocess.run([str(paths.python), "-m", "pip", "uninstall", "-y", "-q", "cbor2"], capture_output=True,
                          text=True, timeout=300)
    assert gone.returncode == 0, gone.stderr
    died = subprocess.run([str(paths.python), "-c", "import vllm.utils.hashing"], capture_output=True, timeout=300)
    assert died.returncode != 0
    fault = fault_from_log(died.stderr)
    assert fault.exc_type == "ModuleNotFoundError" and "/site-packages/vllm/" in fault.frames[-1].file
    site = str(paths.site_packages())
    ctx = RepairContext(host=LocalHost(), python=str(paths.python), roots=(site,), site_packages=(site,),
                        library_packages=("vllm",))
    (cand,) = requirement_missing(ctx, fault)
    (step,) = cand.patch.host_steps  # pip's plan, proven over the env: the release it resolved, pinned
    assert step.startswith(f"{paths.python} -m pip install cbor2==") and not cand.patch.files
    assert [c.describe() for c in cand.checks] == ["import cbor2"]
    assert any("requires cbor2, which is not installed" in line for line in cand.evidence)
    # a module that no requirement the library declares names: not proven missing from the env, nothing
    other = fault_from_log(died.stderr.replace(b"'cbor2'", b"'cbor3'"))
    assert requirement_missing(ctx, other) == []
