"""medic on every Python ≥ 3.11 this machine has: ``python bench/pythons.py`` (``make check-pythons``).

The wheel is built once (from a copy of the tree: nothing is written here), then for each working Python ≥ 3.11
found — every ``python3.N`` on PATH, /usr/bin, /usr/local/bin, pyenv's and uv's versions — a fresh venv installs it
with its ``dev`` extra from the package index and runs the tests that need no lab (``FAST_TESTS``) from a copy of
tests/, so the installed wheel is what they import. A candidate that does not answer (a version manager's shim for a
version not selected says "command not found") is passed over; each minor version is run once. One line per
Python, then ``pythons=N passed=P``; the exit status is 0 only when every one passed and at least one was found.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "agent", "tools", "lab", "playbooks")
# tests that start no lab, no sshd, no server: the nodes' decisions and the pure readers
FAST_TESTS = ("tests/test_fast_tier.py", "tests/test_graph_shape.py", "tests/test_logs.py")
MINIMUM = (3, 11)
ASK_VERSION = "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])"


@dataclass(frozen=True)
class Python:
    path: str
    version: tuple[int, int]

    @property
    def name(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def candidates(path_var: str | None = None, home: Path | None = None) -> list[str]:
    """Every file that may be a Python 3: ``python3.N`` on PATH first, then the places version managers keep them."""
    home = home or Path.home()
    dirs = [d for d in (path_var if path_var is not None else os.environ.get("PATH", "")).split(os.pathsep) if d]
    patterns = [f"{d}/python3.[0-9]*" for d in [*dirs, "/usr/bin", "/usr/local/bin"]]
    patterns += [f"{home}/.pyenv/versions/*/bin/python3.[0-9]*",
                 f"{home}/.local/share/uv/python/cpython-*/bin/python3.[0-9]*"]
    found: list[str] = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            if path.rsplit("python", 1)[1].replace(".", "").isdigit() and path not in found:
                found.append(path)
    return found


def answer(path: str) -> tuple[int, int] | None:
    """The version a candidate says it is, or None when it does not run (a failing shim) or lacks venv."""
    try:
        proc = subprocess.run([path, "-c", ASK_VERSION], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    major, _, minor = proc.stdout.strip().partition(".")
    if proc.returncode != 0 or not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def find_pythons(path_var: str | None = None, home: Path | None = None) -> list[Python]:
    """One working Python per minor version ≥ 3.11, oldest first."""
    chosen: dict[tuple[int, int], Python] = {}
    for path in candidates(path_var, home):
        version = answer(path)
        if version is not None and version >= MINIMUM and version not in chosen:
            chosen[version] = Python(path, version)
    return [chosen[v] for v in sorted(chosen)]


def build_wheel(root: Path) -> Path:
    """The wheel, and beside it the tests as they are now (each Python's copy is taken from there)."""
    tree = root / "tree"
    shutil.copytree(ROOT / "tests", root / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            tree.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(tree)],
                   check=True, stdin=subprocess.DEVNULL)
    return next((root / "dist").glob("medic-*.whl"))


def check(python: Python, wheel: Path, root: Path) -> tuple[bool, str]:
    """Install the wheel (with its dev extra) into a venv of ``python`` and run FAST_TESTS there."""
    venv = root / f"venv-{python.name}"
    log = root / f"python-{python.name}.log"
    tests = root / f"tests-{python.name}"
    shutil.copytree(root / "tests", tests / "tests")
    vpy = venv / "bin" / "python"
    steps = [[python.path, "-m", "venv", str(venv)],
             [str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[dev]"],
             [str(vpy), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *FAST_TESTS]]
    with open(log, "w") as out:
        for step in steps:
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            proc = subprocess.run(step, cwd=tests, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:]
                return False, f"{Path(step[2] if len(step) > 2 else step[0]).name} failed: {tail[0] if tail else ''}"
    summary = log.read_text(errors="replace").strip().splitlines()[-1:]
    return True, summary[0] if summary else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/pythons.py", description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="only say which Pythons would be checked")
    args = parser.parse_args(argv)
    pythons = find_pythons()
    if not pythons:
        print("error: no working Python >= 3.11 found on PATH, /usr/bin, /usr/local/bin, pyenv or uv", file=sys.stderr)
        return 1
    if args.list:
        for python in pythons:
            print(f"{python.name} {python.path}")
        return 0
    passed = 0
    with tempfile.TemporaryDirectory(prefix="medic-pythons-") as tmp:
        wheel = build_wheel(Path(tmp))
        for python in pythons:
            ok, said = check(python, wheel, Path(tmp))
            passed += ok
            print(f"python {python.name} ({python.path}): {'ok' if ok else 'FAILED'}: {said}", flush=True)
    print(f"pythons={len(pythons)} passed={passed}")
    return 0 if passed == len(pythons) else 1


if __name__ == "__main__":
    sys.exit(main())
