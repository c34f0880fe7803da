"""Patch roots (agent/nodes/preflight.py patch_roots): the target env's OWN site-packages and the workdir,
and more only where the user names it with --patch-root. A venv made with --system-site-packages sees its
base env's packages too: they are shared with every other env on the machine and must not be a root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import SessionConfig, Target
from agent.nodes.preflight import preflight
from agent.session import make_deps
from agent.state import SessionState
from tools.errors import UsageError
from tools.host import LocalHost


@pytest.fixture(scope="module")
def layered_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(python, its own site-packages, the base site-packages it also sees)."""
    root = tmp_path_factory.mktemp("layered")
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", "--system-site-packages", "--without-pip", str(root / "venv")],
                   check=True)
    python = root / "venv" / "bin" / "python"
    own = next((root / "venv" / "lib").glob("python*/site-packages"))
    seen = subprocess.run([str(python), "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                          capture_output=True, text=True, check=True).stdout.split()
    shared = next(Path(p) for p in seen if Path(p).is_dir() and not p.startswith(str(root)))
    return python, own, shared


def preflight_of(tmp_path: Path, python: Path, **target: object) -> dict[str, object]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    config = SessionConfig(session_id="roots", traces_dir=str(tmp_path / "traces"),
                           target=Target(python=str(python), workdir=str(work), command=["python", "x.py"],
                                         **target))  # type: ignore[arg-type]
    deps = make_deps(config, host=LocalHost())
    try:
        state: SessionState = {}
        return dict(preflight(state, deps)["preflight"])
    finally:
        deps.trace.close()


def test_the_base_env_the_venv_sees_is_not_a_root(layered_venv: tuple[Path, Path, Path], tmp_path: Path) -> None:
    python, own, shared = layered_venv
    info = preflight_of(tmp_path, python)
    assert str(shared) in info["site_packages"]  # type: ignore[operator]  # the source lookups still read it
    assert info["roots"] == [str(own), str(tmp_path / "work")]


def test_a_named_patch_root_is_added(layered_venv: tuple[Path, Path, Path], tmp_path: Path) -> None:
    python, own, shared = layered_venv
    info = preflight_of(tmp_path, python, extra_patch_roots=[str(shared)])
    assert info["roots"] == [str(own), str(tmp_path / "work"), str(shared)]


def test_a_patch_root_that_does_not_exist_is_bad_input(layered_venv: tuple[Path, Path, Path], tmp_path: Path
                                                       ) -> None:
    python, _, _ = layered_venv
    with pytest.raises(UsageError, match=r"--patch-root .*/nowhere does not exist"):
        preflight_of(tmp_path, python, extra_patch_roots=[str(tmp_path / "nowhere")])
