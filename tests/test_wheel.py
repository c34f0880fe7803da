"""A wheel install (not editable) carries what medic reads at run time: the playbooks, the lab's driver, checker
and model maker, its requirements — every file of the packaged folders. The wheel is built from a copy of the
tree (nothing is written here), installed into a fresh venv that borrows only the dependencies of .venv (a .pth
file), and run from elsewhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from agent.repair.playbooks import load_playbooks
from tools.errors import MedicError

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "agent", "tools", "lab", "playbooks")
PACKAGES = {"agent": "agent", "tools": "tools", "lab": "lab", "medic_playbooks": "playbooks"}  # name: folder
PROBE = """\
import agent, json, pathlib, sys
from importlib import resources
from agent.repair.playbooks import load_playbooks
files = {name: sorted(str(p.relative_to(pathlib.Path(str(resources.files(name)))))
                      for p in pathlib.Path(str(resources.files(name))).rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)
         for name in sys.argv[1:]}
print(json.dumps({"agent": agent.__file__, "playbooks": len(load_playbooks()), "files": files}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with medic installed from its wheel; returns the venv."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy2(src, tree / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"),
                            str(tree)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((root / "dist").glob("medic-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                          "--no-deps", "-q", str(wheel)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    # the dependencies come from .venv's site-packages (its .pth files, the editable medic among them, are not
    # read from a folder a .pth names)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "zz_medic_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_the_wheel_ships_every_playbook_and_the_lab(installed: Path, tmp_path: Path) -> None:
    probe = subprocess.run([str(installed / "bin" / "python"), "-c", PROBE, *PACKAGES], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout)
    assert found["agent"].startswith(str(installed)), found  # the wheel's code, not the checkout's
    assert found["playbooks"] == len(list((REPO / "playbooks").glob("*.yaml"))) == len(load_playbooks()) > 0
    for name, folder in PACKAGES.items():  # every file of the tree (data files too) is in the wheel
        in_repo = sorted(str(p.relative_to(REPO / folder)) for p in (REPO / folder).rglob("*")
                         if p.is_file() and "__pycache__" not in p.parts)
        assert found["files"][name] == in_repo, name
    helped = subprocess.run([str(installed / "bin" / "medic"), "--help"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and "revert" in helped.stdout, helped.stderr[-2000:]


def test_no_playbooks_is_an_error_not_silence(tmp_path: Path) -> None:
    with pytest.raises(MedicError, match="no playbooks"):
        load_playbooks(tmp_path)
