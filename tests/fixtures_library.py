"""A library package and a fixable module made on the spot, read by the real probe of this test's python: the
library installed under a ``site-packages`` folder on PYTHONPATH (as vLLM is), the fixable module under another
(as speculators is), and the repair context over both."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.repair.types import RepairContext
from tools.host import LocalHost


@dataclass(frozen=True)
class MadeLibrary:
    ctx: RepairContext
    library: Path  # the library package's folder
    fixable: Path  # speculators/gen.py


def made_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, files: dict[str, str],
                 fixable: str) -> MadeLibrary:
    lib = tmp_path / "lib" / "site-packages" / package
    lib.mkdir(parents=True)
    for name, text in files.items():
        (lib / name).write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(lib.parent))
    site = tmp_path / "site-packages"
    gen = site / "speculators" / "gen.py"
    gen.parent.mkdir(parents=True)
    gen.write_text(fixable)
    ctx = RepairContext(host=LocalHost(), python=sys.executable, roots=(str(site),), library_packages=(package,),
                        site_packages=(str(site),), workdir=str(tmp_path / "work"))
    return MadeLibrary(ctx, lib, gen)
