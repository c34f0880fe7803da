"""The server lab for the tests: built (or reused) once per session, never skipped; a private copy per test.

``private_server_lab`` gives a test its own lab: the venv as a hard-link clone (its scripts rewritten to name
the copy), everything else hard-linked, then pristine speculators again. medic writes every file by rename,
so nothing a test does reaches the shared lab.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.nodes.diagnose import fault_from_log
from agent.repair.types import Fault, RepairContext
from lab.build import LabPaths, clone_venv
from lab.server_lab import ServerLabBuilder, ServerLabPaths, server_root
from tools.errors import LabError
from tools.host import LocalHost

SERVER_LOGS = Path(__file__).parent / "data" / "server_logs"  # logs server labs wrote here, their path as {LAB}


@pytest.fixture(scope="session")
def server_lab() -> ServerLabPaths:
    builder = ServerLabBuilder(LabPaths(server_root()))
    try:
        builder.build(("tiny",))
    except LabError as err:
        pytest.fail(f"the server lab did not build: {err}", pytrace=False)
    return builder.server


def private_copy(server_lab: ServerLabPaths, root: Path) -> ServerLabPaths:
    """A pristine copy of the server lab at ``root``: its venv cloned, the rest hard-linked."""
    root.mkdir()
    for part in server_lab.root.iterdir():
        if part.name == "venv":
            clone_venv(part, root / "venv")
        else:
            subprocess.run(["cp", "-al", str(part), str(root / part.name)], check=True, timeout=300)
    ServerLabBuilder(LabPaths(root)).reset()
    return ServerLabPaths(root)


@pytest.fixture
def private_server_lab(server_lab: ServerLabPaths, tmp_path: Path) -> ServerLabPaths:
    return private_copy(server_lab, tmp_path / "server-lab")


def server_repair_context(lab: ServerLabPaths) -> RepairContext:
    """What the repair engine sees of a server lab: its vLLM the library, speculators and hs-connectors fixable."""
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site, str(lab.work)),
                         fixable_packages=("speculators", "hs_connectors"), library_packages=("vllm",),
                         workdir=str(lab.work), site_packages=(site,))


def logged_fault(lab: ServerLabPaths, name: str) -> Fault:
    """The fault of a recorded server log, read as if ``lab`` had written it."""
    return fault_from_log((SERVER_LOGS / name).read_bytes().replace(b"{LAB}", str(lab.root).encode()))
