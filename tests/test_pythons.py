"""`make check-pythons` finds every working Python ≥ 3.11 (bench/pythons.py): a version manager's shim that fails
is passed over, an old Python is left out, each minor version is checked once, and `make check` runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bench.pythons import find_pythons

REPO = Path(__file__).resolve().parents[1]


def test_a_failing_shim_is_passed_over_and_old_pythons_are_left_out(tmp_path: Path) -> None:
    shims, real = tmp_path / "shims", tmp_path / "versions"
    shims.mkdir()
    real.mkdir()
    for version in ("3.12", "3.13"):  # pyenv's shim for a version not selected
        shim = shims / f"python{version}"
        shim.write_text(f"#!/bin/sh\necho 'pyenv: python{version}: command not found' >&2\nexit 127\n")
        shim.chmod(0o755)
    old = real / "python3.10"  # answers, but is too old
    old.write_text("#!/bin/sh\necho 3.10\n")
    old.chmod(0o755)
    this = f"{sys.version_info[0]}.{sys.version_info[1]}"
    (real / f"python{this}").symlink_to(sys.executable)
    (real / f"python{this}-config").write_text("not a python")
    found = find_pythons(f"{shims}:{real}", home=tmp_path)
    here = [p for p in found if p.path.startswith(str(tmp_path))]
    assert [(p.name, p.path) for p in here] == [(this, str(real / f"python{this}"))]
    assert all(p.version >= (3, 11) for p in found)
    assert len({p.version for p in found}) == len(found)  # each minor version once


def test_make_check_runs_every_python_but_make_test_does_not() -> None:
    plan = subprocess.run(["make", "-n", "-p", "check-pythons"], cwd=REPO, capture_output=True, text=True, timeout=60)
    rules = dict(re.findall(r"^(check|test):(.*)$", plan.stdout, re.M))
    assert "check-pythons" in rules["check"].split(), rules
    assert "check-pythons" not in rules["test"].split(), rules
    assert "bench/pythons.py" in subprocess.run(["make", "-n", "check-pythons"], cwd=REPO, capture_output=True,
                                                text=True, timeout=60).stdout
