"""A tiny fake target for tests that need a real launch but not vLLM.

A ``python -m venv --without-pip`` venv whose site-packages hold ``fakelib`` (``compute(x, *, mode)``) and
``fakecaller``, which still passes ``legacy=True``: medic's derived ``unexpected_kwarg`` repair drops it. The
driver (in the workdir) may first print numbered lines for a while (``seconds``), so a test has a wait to
cut a link or kill medic in; then it calls fakecaller and writes out.txt, which the validator checks.

``fake`` is the default (approve mode, session ``s1``, no wait); ``make_fake(...)`` builds others.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.config import SessionConfig, Target
from agent.session_files import save_config

CALLER = "import fakelib\n\n\ndef run(x):\n    return fakelib.compute(x, mode='a', legacy=True)\n"
FIXED = "import fakelib\n\n\ndef run(x):\n    return fakelib.compute(x, mode='a')\n"
LIB = "def compute(x, *, mode):\n    return f'{x}:{mode}'\n"
DRIVER = """\
import pathlib, sys, time
LINES, INTERVAL = {lines}, {interval}
sys.stdout.write({prelude!r})
sys.stdout.flush()
for i in range(1, LINES + 1):
    print(f"line {{i:06d}}", flush=True)
    time.sleep(INTERVAL)
import fakecaller
pathlib.Path('out.txt').write_text(fakecaller.run(1))
print("driver done", flush=True)
"""
CHECK = "import pathlib, sys; sys.exit(0 if pathlib.Path('out.txt').read_text() == '1:a' else 1)"


@dataclass
class Fake:
    root: Path
    config: SessionConfig
    caller: Path  # fakecaller/__init__.py, the file the repair patches
    home: Path  # $MEDIC_HOME
    python: Path
    work: Path
    site: Path

    @property
    def trace_path(self) -> Path:
        return Path(self.config.traces_dir) / f"{self.config.session_id}.jsonl"

    @property
    def trace(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.trace_path.read_text().splitlines()[1:]]

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.trace if e["kind"] == kind]

    def kinds(self) -> list[str]:
        if not self.trace_path.exists():
            return []
        out = []
        for line in self.trace_path.read_text().splitlines()[1:]:
            with contextlib.suppress(ValueError, KeyError):  # a line being written right now
                out.append(json.loads(line)["kind"])
        return out

    @property
    def host_dir(self) -> Path:
        return Path(self.config.host_dir)

    def launch_ledger(self) -> list[dict[str, Any]]:
        """The host-side launch ledger, L1, L2, ... in order."""
        folder = self.host_dir / "launches"
        files = sorted(folder.glob("L*.json"), key=lambda p: int(p.stem[1:])) if folder.exists() else []
        return [json.loads(p.read_text()) for p in files]

    def run_dirs(self) -> list[Path]:
        """Every run folder medic started (a launch started twice would show two under one L<n>)."""
        return sorted(p.parent for p in (self.host_dir / "runs").glob("L*/*/pid"))

    def patch_ledger(self) -> list[dict[str, Any]]:
        folder = self.host_dir / "patches"
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []

    def save(self, **updates: Any) -> SessionConfig:
        """Change the session config (SessionConfig fields) and save it for the CLI."""
        self.config = self.config.model_copy(update=updates)
        save_config(self.config)
        return self.config


MakeFake = Callable[..., Fake]


def build_fake(root: Path, *, session_id: str = "s1", mode: str = "approve", seconds: float = 0.0,
               lines: int | None = None, prelude: str = "", env: dict[str, str] | None = None,
               args: list[str] | None = None, host: str = "local", save: bool = True,
               **config: Any) -> Fake:
    """A fake target under ``root`` (its own venv, workdir, traces). $MEDIC_HOME must be set by the caller.

    ``seconds``/``lines``: the driver prints ``lines`` numbered lines over ``seconds`` before it calls the
    drifted code (default 10 lines a second). ``prelude``: text the job prints first. ``args``: extra
    command-line arguments for the driver (ignored by it). ``config``: more SessionConfig fields.
    """
    root.mkdir(parents=True, exist_ok=True)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "fakelib").mkdir()
    (site / "fakelib" / "__init__.py").write_text(LIB)
    (site / "fakecaller").mkdir()
    (site / "fakecaller" / "__init__.py").write_text(CALLER)
    work = root / "work"
    work.mkdir()
    count = lines if lines is not None else int(seconds * 10)
    interval = (seconds / count) if count else 0.0
    (work / "driver.py").write_text(DRIVER.format(lines=count, interval=interval, prelude=prelude))
    target = Target(host=host, python=str(py), workdir=str(work), command=[str(py), "driver.py", *(args or [])],
                    env=dict(env or {}), validate_command=[str(py), "-c", CHECK], library_packages=["fakelib"],
                    fixable_packages=["fakecaller"])
    settings: dict[str, Any] = {"scan": False, "traces_dir": str(root / "traces"), **config}
    cfg = SessionConfig(session_id=session_id, target=target, mode=mode, **settings)  # type: ignore[arg-type]
    if save:
        save_config(cfg)
    return Fake(root, cfg, site / "fakecaller" / "__init__.py", Path(os.environ["MEDIC_HOME"]), py, work, site)


@pytest.fixture
def make_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakeFake:
    """``make_fake(session_id=..., mode=..., seconds=..., ...)``: a fresh fake target per call (see build_fake)."""
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    made: list[int] = []

    def make(**options: Any) -> Fake:
        made.append(1)
        return build_fake(tmp_path / ("" if len(made) == 1 else f"fake{len(made)}"), **options)

    return make


@pytest.fixture
def fake(make_fake: MakeFake) -> Fake:
    """The default fake target: approve mode, session s1, a driver that fails at once."""
    return make_fake()


# -- the real CLI in a fresh process, and the figures bench/faults.py prints ---------------------------------
REPO = Path(__file__).resolve().parents[1]
MEDIC = [sys.executable, "-c", "from agent.cli.main import main; main()"]


def medic_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180.0,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``medic ARGS`` in a fresh process with no terminal; $MEDIC_HOME and the rest come from os.environ."""
    return subprocess.run([*MEDIC, *args], cwd=cwd or REPO, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, timeout=timeout)


def spawn_medic(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*MEDIC, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})


def record_figure(name: str, *, survived: int, total: int, **counters: int | float | str) -> None:
    """One row for bench/faults.py (a JSON line to $MEDIC_FAULTS_OUT when set). Call it before asserting."""
    out = os.environ.get("MEDIC_FAULTS_OUT")
    if not out:
        return
    with open(out, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"fault": name, "survived": survived, "total": total, **counters}) + "\n")
