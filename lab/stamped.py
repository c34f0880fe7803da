"""A build made of stamped steps: each step leaves a stamp only when it has fully succeeded, keyed by what it
was built from, so a second build skips what is done and redoes what died half-way, or whose products are gone;
every command's output goes to the lab's build.log. The lab builders (lab/build.py, lab/server_lab.py,
lab/server_pair_lab.py) say what the steps are."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.lab_files import write_atomic
from lab.paths import LabPaths
from tools.errors import LabError

# a step whose redo makes every later one stale: the venv and what is installed into it
INVALIDATING = ("wheels", "venv", "torch", "vllm-requirements", "target-wheels")


@dataclass(frozen=True)
class Step:
    name: str
    describe: str
    key: str  # what the step is built from; a changed key redoes the step
    action: Callable[[], None]
    # what later steps read: a stamp whose products are gone (a folder removed under a build) is no stamp
    makes: tuple[Path, ...] = ()


class StampedBuilder:
    paths: LabPaths

    def steps(self, sizes: tuple[str, ...]) -> list[Step]:
        raise NotImplementedError

    def record_variant(self) -> None:
        """Write down which lab the folder holds (each builder its own way) before any step runs."""

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

    # -- stamps -----------------------------------------------------------------------------------------
    def _stamp(self, step: Step) -> Path:
        return self.paths.stamps / f"{step.name}.json"

    def is_done(self, step: Step) -> bool:
        try:
            stamped = bool(json.loads(self._stamp(step).read_text())["key"] == step.key)
        except (OSError, ValueError, KeyError):
            return False
        return stamped and all(product.exists() for product in step.makes)

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
            invalidated = invalidated or step.name in INVALIDATING
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
