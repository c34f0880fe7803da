"""A value our code pins that the library refuses, where the library picks one itself when it is left unset.

vLLM 0.31's shape in small (a package on PYTHONPATH, read by the real probe): its cache config leaves the block
size to the platform when none is given, and its worker refuses a size its attention kernel does not take. The
fixable generator pins 16 through a module constant, as speculators 0.3.0 does; or, as 0.4 does, through a constant
the host chooses between literals, handed to a scheduler that needs a size too. The fault is the real traceback; the
patched generator is run again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.faults import fault_from_log
from agent.repair.derived_refused_pin import refused_pin
from tests.fixtures_library import made_library
from tools.patches import apply_patch

LIBRARY = {
    "__init__.py": "",
    "config.py": '''
from dataclasses import dataclass


@dataclass
class CacheConfig:
    block_size: int = None
    memory: float = 0.9

    def __post_init__(self):
        if self.block_size is None:
            self.block_size = 128  # the platform's own choice
''',
    "worker.py": '''
def select_common_block_size(kv_manager_block_size, supported):
    if kv_manager_block_size % supported == 0:
        return kv_manager_block_size
    raise ValueError(
        f"No common block size for {kv_manager_block_size} ("
        + f"CPU_ATTN: [MultipleOf({supported})]"
        + ")."
    )


def initialize(config):
    return select_common_block_size(config.block_size, 32)
''',
}
GENERATOR = '''
from stagelib.config import CacheConfig
from stagelib.worker import initialize

BLOCK_SIZE = 16  # Block size for KV cache


class Generator:
    def __init__(self):
        self.config = CacheConfig(
            block_size=BLOCK_SIZE,
            memory=0.5,
        )
        self.blocks = initialize(self.config)


if __name__ == "__main__":
    print("blocks", Generator().blocks)
'''


@pytest.fixture
def pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    made = made_library(tmp_path, monkeypatch, "stagelib", LIBRARY, GENERATOR)
    ctx, gen, lib = made.ctx, made.fixable, made.library

    def fault():
        run = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and "No common block size for 16" in run.stderr, run.stderr
        return fault_from_log(run.stderr.encode())

    return ctx, gen, lib, fault


def test_the_pin_the_library_refuses_is_left_to_the_library(pinned, tmp_path: Path) -> None:
    ctx, gen, _, fault = pinned
    [cand] = refused_pin(ctx, fault())
    assert cand.origin == "derived:refused_pin"
    assert "-            block_size=BLOCK_SIZE,\n" in cand.patch.diff, cand.patch.diff
    changed = [line for line in cand.patch.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-            block_size=BLOCK_SIZE,"], changed  # only the pin goes
    assert "kv_manager_block_size" in cand.rationale and "default is None" in cand.rationale
    apply_patch(ctx.host, cand.patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    after = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=60)
    assert after.returncode == 0 and after.stdout.strip() == "blocks 128", after.stderr


def test_a_pin_the_library_would_pin_again_is_kept(pinned) -> None:
    """A concrete library default is one more pin, not the library's choice: nothing is proposed."""
    ctx, _, lib, fault = pinned
    (lib / "config.py").write_text(LIBRARY["config.py"].replace("block_size: int = None", "block_size: int = 16"))
    assert refused_pin(ctx, fault()) == []


def test_a_refused_value_that_is_not_ours_is_not_touched(pinned) -> None:
    """The refusal prints a size our code does not pass (the library computed it): nothing is ours to drop."""
    ctx, gen, _, fault = pinned
    gen.write_text(GENERATOR.replace("BLOCK_SIZE = 16", "BLOCK_SIZE = 24").replace(
        "self.blocks = initialize(self.config)", "self.config.block_size = 16\n        self.blocks = "
                                                 "initialize(self.config)"))
    assert refused_pin(ctx, fault()) == []


SCHEDULER = '''
class Scheduler:
    def __init__(self, config, block_size):
        # the scheduling granularity must agree with the cache's blocks (vLLM's coordinator asserts it)
        assert block_size % config.block_size == 0, f"{block_size} does not hold blocks of {config.block_size}"
        self.block_size = block_size
'''
ENGINE = '''
from stagelib.config import CacheConfig
from stagelib.scheduler import Scheduler


def resolve_block_sizes(config):
    return config.block_size, config.block_size


class Engine:
    def __init__(self, config):
        scheduler_block_size, hash_block_size = resolve_block_sizes(config)
        self.scheduler = Scheduler(config=config, block_size=scheduler_block_size)
'''
# the generator as speculators 0.4 writes it: the constant chosen by the host, and handed to the scheduler too
WITH_SCHEDULER = (GENERATOR
                  .replace("BLOCK_SIZE = 16  # Block size for KV cache",
                           "def is_npu_available():\n    return False\n\n\n"
                           "BLOCK_SIZE = 128 if is_npu_available() else 16  # Block size for KV cache")
                  .replace("from stagelib.worker import initialize\n",
                           "from stagelib.scheduler import Scheduler\nfrom stagelib.worker import initialize\n")
                  .replace("        self.blocks = initialize(self.config)\n",
                           "        self.blocks = initialize(self.config)\n"
                           "        self.scheduler = Scheduler(config=self.config, block_size=BLOCK_SIZE)\n")
                  .replace('print("blocks", Generator().blocks)',
                           'made = Generator()\n    print("blocks", made.blocks, made.scheduler.block_size)'))


def test_our_other_pin_of_the_refused_value_takes_what_the_library_passes_there(pinned, tmp_path: Path) -> None:
    """speculators 0.4 hands the same constant to the scheduler, which needs a size: left at 16 it would disagree
    with the 128 the library chose. It takes what the library's own engine passes, in our names, in one change."""
    ctx, gen, lib, fault = pinned
    (lib / "scheduler.py").write_text(SCHEDULER)
    (lib / "engine.py").write_text(ENGINE)
    gen.write_text(WITH_SCHEDULER)
    [cand] = refused_pin(ctx, fault())
    assert "-            block_size=BLOCK_SIZE,\n" in cand.patch.diff, cand.patch.diff
    assert "scheduler_block_size, hash_block_size = resolve_block_sizes(self.config)" in cand.patch.diff
    assert "Scheduler(config=self.config, block_size=scheduler_block_size)" in cand.patch.diff
    assert "Scheduler given what the library's own callers pass there" in cand.rationale
    apply_patch(ctx.host, cand.patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    after = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=60)
    assert after.returncode == 0 and after.stdout.strip() == "blocks 128 128", after.stderr


def test_our_other_pin_no_library_caller_shows_is_left_and_the_drop_stands_alone(pinned) -> None:
    ctx, gen, lib, fault = pinned
    (lib / "scheduler.py").write_text(SCHEDULER)  # no engine: no caller of the library passes a size
    gen.write_text(WITH_SCHEDULER)
    [cand] = refused_pin(ctx, fault())
    changed = [line for line in cand.patch.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-            block_size=BLOCK_SIZE,"], changed
