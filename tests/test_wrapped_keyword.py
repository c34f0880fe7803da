"""Issue 24's wrong patch, reproduced: a driver in the workdir calls a client whose decorator's wrapper takes
``*args, **kwargs`` and consumes ``max_retries``; the inner def does not name it (``inspect.signature``, which
follows ``__wrapped__``, would say it is not taken). Neither the scan nor the derived repair, from the scan's
finding or from a run's TypeError, may propose anything for it. A keyword the outermost callable provably
rejects (through a forwarding wrapper) is still found and fixed: the same code path is alive.

The target env is real: a venv over the lab's python with the client installed in its site-packages."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from agent.repair.engine import RepairEngine
from agent.repair.scan import scan
from agent.repair.types import Fault, FrameRef, RepairContext
from lab.build import LabPaths
from tools.host import LocalHost

CLIENT = '''
import functools


def retrying(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        retries = kwargs.pop("max_retries", 0)
        for attempt in range(retries + 1):
            try:
                return fn(*args, **kwargs)
            except OSError:
                if attempt == retries:
                    raise
    return wrapper


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("calling", fn.__name__)
        return fn(*args, **kwargs)
    return wrapper


@retrying
def generate(prompts, timeout=30.0):
    return list(prompts)


@logged
def upload(path, chunk_size=1024):
    return path
'''

DRIVER = '''
from hsclient import generate, upload

out = generate(["a"], max_retries=3)
upload("x", chunksize=4096)
'''


@pytest.fixture(scope="module")
def target(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> tuple[RepairContext, Path]:
    root = tmp_path_factory.mktemp("wrapped")
    venv = root / "venv"
    subprocess.run([str(lab.python), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    (site / "hsclient").mkdir()
    (site / "hsclient" / "__init__.py").write_text(textwrap.dedent(CLIENT))
    work = root / "work"
    work.mkdir()
    driver = work / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER).lstrip())
    ctx = RepairContext(host=LocalHost(), python=str(venv / "bin" / "python"), roots=(str(work),),
                        fixable_packages=("hsclient",), library_packages=(), site_packages=(str(site),),
                        workdir=str(work))
    return ctx, driver


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_scan_finds_only_what_the_outermost_callable_rejects(target: tuple[RepairContext, Path]) -> None:
    ctx, driver = target
    found = [(f.finding.callee, f.finding.name) for f in scan(ctx, str(driver)) if f.finding]
    assert found == [("upload", "chunksize")]


def test_no_patch_for_the_keyword_the_wrapper_consumes(target: tuple[RepairContext, Path]) -> None:
    ctx, driver = target
    line = line_of(driver, "max_retries")
    fault = Fault("crash", "TypeError", "generate() got an unexpected keyword argument 'max_retries'",
                  (FrameRef(str(driver), line, "<module>"),))
    assert RepairEngine().candidates(ctx, fault) == []


def test_a_keyword_a_forwarding_wrapper_rejects_is_still_fixed(target: tuple[RepairContext, Path]) -> None:
    ctx, driver = target
    fault = next(f for f in scan(ctx, str(driver)) if f.finding and f.finding.name == "chunksize")
    candidates = RepairEngine().candidates(ctx, fault)
    assert candidates and candidates[0].origin == "derived:unexpected_kwarg:rename"
    assert "+upload(\"x\", chunk_size=4096)" in candidates[0].patch.files[0].diff
