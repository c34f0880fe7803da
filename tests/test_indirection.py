"""Derived repairs one step of indirection away, on copies of the REAL installed sources of the lab.

- A required argument the library's own caller computes through a helper's tuple return: vLLM 0.16.0's
  EngineCore is copied into a package of its own (``vllm_next``) and edited so that ``scheduler_block_size``
  comes from ``a, b = helper(...)``, as later vLLM releases do; the missing ``block_size`` of speculators'
  ``Scheduler(...)`` is then derived through that helper.
- A CUDA-only call made in a helper of speculators rather than on the failing line: the scan follows the call
  graph to it, and the repair patches the helper, guarded by vLLM's ``current_platform``.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.repair import derived_calls
from agent.repair.edits import Source
from agent.repair.engine import RepairEngine
from agent.repair.scan_rules import device_drift
from agent.repair.types import Fault, FrameRef, RepairContext
from lab.build import RUN_ENV
from tests.fixtures_lab import GEN
from tools.patches import apply_patch

pytestmark = pytest.mark.lab
CORE = "vllm/v1/engine/core.py"
MISSING = "Scheduler.__init__() missing 1 required positional argument: 'block_size'"


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def span(text: str, node: ast.AST) -> tuple[int, int]:
    """Character offsets of a node spanning whole lines."""
    lines = text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: node.lineno - 1])  # type: ignore[attr-defined]
    end = sum(len(line) for line in lines[: node.end_lineno])  # type: ignore[attr-defined]
    return start, end


def engine_copy(lab_site: Path, root: Path, *, through: str) -> Path:
    """vLLM's EngineCore copied to ``root/vllm_next`` with its ``scheduler_block_size = (...)`` moved into a
    helper whose tuple return the engine unpacks: a module function (``through="function"``) or a method of
    the engine (``through="method"``). Returns the copied core.py."""
    text = (lab_site / CORE).read_text()
    tree = ast.parse(text)
    [assign] = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "scheduler_block_size"]
    value = ast.get_source_segment(text, assign.value)
    assert value and "vllm_config.cache_config.block_size" in value, value
    start, end = span(text, assign)
    indent = " " * assign.col_offset
    package = root / "vllm_next"
    for folder in (package, package / "v1", package / "v1" / "engine", package / "v1" / "core"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    if through == "function":
        (package / "v1" / "core" / "kv_cache_utils.py").write_text(
            "def resolve_kv_cache_block_sizes(kv_cache_config, vllm_config):\n"
            f"    scheduler_block_size = ({value})\n"
            "    if len(kv_cache_config.kv_cache_groups) <= 1:\n"
            "        return scheduler_block_size, scheduler_block_size\n"
            "    groups = kv_cache_config.kv_cache_groups\n"
            "    return scheduler_block_size, min(g.kv_cache_spec.block_size for g in groups)\n"
        )
        unpack = (f"{indent}scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(\n"
                  f"{indent}    kv_cache_config, vllm_config\n{indent})\n")
        text = (text[:start] + unpack + text[end:]).replace(
            "\nfrom vllm.", "\nfrom vllm_next.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes\nfrom vllm.",
            1)
    else:
        unpack = f"{indent}(scheduler_block_size, hash_block_size) = self._resolve_block_sizes(kv_cache_config)\n"
        [engine] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineCore"]
        init = next(n for n in engine.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        own = re.sub(r"(?<![.\w])vllm_config\b", "self.vllm_config", value)  # the engine's own config
        method = ("\n    def _resolve_block_sizes(self, kv_cache_config):\n"
                  f"        scheduler_block_size = ({own})\n"
                  "        return scheduler_block_size, scheduler_block_size\n")
        _, init_end = span(text, init)
        text = text[:start] + unpack + text[end:init_end] + method + text[init_end:]
    (package / "v1" / "engine" / "core.py").write_text(text)
    return package / "v1" / "engine" / "core.py"


@pytest.fixture
def future_engine(speculators_copy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The repair context over pristine speculators, whose library is ``vllm_next`` (the edited engine copy,
    found on PYTHONPATH by the target's probe) before the real vllm 0.16.0."""
    ctx, site = speculators_copy
    lib_root = tmp_path / "lib"
    monkeypatch.setenv("PYTHONPATH", str(lib_root))
    ctx.library_packages = ("vllm_next", "vllm")

    def make(through: str) -> tuple[RepairContext, Path, Path]:
        shutil.rmtree(lib_root, ignore_errors=True)
        core = engine_copy(Path(ctx.site_packages[0]), lib_root, through=through)
        return ctx, site / GEN, core

    return make


def missing_block_size(path: Path) -> Fault:
    return Fault("crash", "TypeError", MISSING, (FrameRef(str(path), line_of(path, "self.scheduler = Scheduler("),
                                                          "__init__"),))


def test_a_helper_our_code_can_call_is_called_the_way_the_library_calls_it(future_engine) -> None:
    ctx, gen, core = future_engine("function")
    [cand] = derived_calls.missing_argument(ctx, missing_block_size(gen))
    diff = cand.patch.diff
    assert "+        from vllm_next.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes\n" in diff, diff
    assert ("+        scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, "
            "self.vllm_config)\n") in diff, diff
    assert "+            block_size=scheduler_block_size,\n" in diff, diff
    assert any(str(core) in e and "resolve_kv_cache_block_sizes(" in e for e in cand.evidence), cand.evidence
    # the unpacking comes right before the call, and the patched file compiles
    apply_patch(ctx.host, cand.patch, roots=ctx.roots, ledger_dir=str(gen.parents[3] / "ledger"))
    lines = gen.read_text().splitlines()
    at = line_of(gen, "self.scheduler = Scheduler(") - 1
    assert lines[at - 1].strip().startswith("scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(")
    compile(gen.read_text(), str(gen), "exec")


def test_a_helper_only_the_library_can_call_gives_the_attribute_it_reads(future_engine) -> None:
    ctx, gen, _ = future_engine("method")
    [cand] = derived_calls.missing_argument(ctx, missing_block_size(gen))
    diff = cand.patch.diff
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert len(added) == 1, diff  # no call of the engine's method: what it returns, in our names
    assert added[0][1:].strip().startswith("block_size=self.vllm_config.cache_config.block_size"), diff
    assert "self.vllm_config.parallel_config.decode_context_parallel_size" in added[0], diff
    assert "_resolve_block_sizes" not in added[0], diff
    assert any("def _resolve_block_sizes" in e for e in cand.evidence), cand.evidence


# -- a CUDA-only call in a helper of speculators --------------------------------------------------------------
HELPER = "speculators/utils/device.py"
HELPER_TEXT = '''"""Device helpers."""

import torch


def free_device_memory(device):
    """Free memory of ``device``, in bytes."""
    return torch.cuda.mem_get_info(device)[0]
'''
NO_DRIVER = "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver"


@pytest.fixture
def device_helper(speculators_copy) -> tuple[RepairContext, Path, Path]:
    """Speculators' generator asks a helper of its own package (a module the scan does not list) for free
    memory, instead of calling ``torch.cuda.mem_get_info()`` on its own line."""
    ctx, site = speculators_copy
    gen, helper = site / GEN, site / HELPER
    helper.parent.mkdir(parents=True, exist_ok=True)
    helper.write_text(HELPER_TEXT)
    text = gen.read_text()
    assert text.count("free_memory, _ = torch.cuda.mem_get_info()") == 1
    text = text.replace("free_memory, _ = torch.cuda.mem_get_info()", "free_memory = free_device_memory(0)")
    gen.write_text(text.replace("import torch\n", "import torch\n\nfrom speculators.utils.device import "
                                "free_device_memory\n", 1))
    return ctx, gen, helper


def run_helper(ctx: RepairContext, helper: Path) -> subprocess.CompletedProcess[str]:
    """The (patched) helper, run by the lab's python with the real vLLM and torch."""
    code = f"import runpy; print(runpy.run_path({str(helper)!r})['free_device_memory'](0))"
    return subprocess.run([ctx.python, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **RUN_ENV}, stdin=subprocess.DEVNULL)


def test_the_scan_follows_a_call_into_the_helper_that_makes_the_cuda_call(device_helper) -> None:
    ctx, gen, helper = device_helper
    [fault] = device_drift(ctx, [Source(str(gen), gen.read_text())])
    assert "NVIDIA driver" in fault.message, fault.summary
    caller, inner = fault.frames[0], fault.frames[1]
    assert caller.file == str(gen) and "free_device_memory(0)" in caller.code
    assert inner.file == str(helper) and "torch.cuda.mem_get_info(device)" in inner.code
    assert any("torch/cuda/" in f.file for f in fault.frames[2:])
    [cand, *_] = RepairEngine().candidates(ctx, fault)
    assert cand.origin == "playbook:cuda-memory-query-off-cuda"
    assert [f.path for f in cand.patch.files] == [str(helper)], cand.patch.diff  # the helper, not the caller
    apply_patch(ctx.host, cand.patch, roots=ctx.roots, ledger_dir=str(gen.parents[3] / "ledger"))
    fresh = RepairContext(**{**ctx.__dict__, "memo": {}})
    assert device_drift(fresh, [Source(str(gen), gen.read_text())]) == []
    # the guarded helper now answers on this CUDA-less machine, through vLLM's own platform
    ran = run_helper(ctx, helper)
    assert ran.returncode == 0 and int(ran.stdout.strip().splitlines()[-1]) > 0, ran.stderr[-2000:]


@pytest.mark.parametrize("helper_frame", [True, False], ids=["traceback-with-helper", "frames-stop-at-caller"])
def test_a_run_fault_raised_in_a_helper_is_patched_in_the_helper(device_helper, helper_frame: bool) -> None:
    ctx, gen, helper = device_helper
    torch_frame = FrameRef(str(Path(ctx.site_packages[0]) / "torch/cuda/memory.py"), 1, "mem_get_info")
    frames = [FrameRef(str(gen), line_of(gen, "free_memory = free_device_memory(0)"), "__init__")]
    if helper_frame:
        frames.append(FrameRef(str(helper), line_of(helper, "return torch.cuda.mem_get_info"), "free_device_memory"))
    fault = Fault("crash", "RuntimeError", NO_DRIVER, (*frames, torch_frame))
    [cand, *_] = RepairEngine().candidates(ctx, fault)
    assert cand.origin == "playbook:cuda-memory-query-off-cuda"
    assert [f.path for f in cand.patch.files] == [str(helper)], cand.patch.diff
    diff = cand.patch.diff
    assert "+    if current_platform.is_cuda_alike():\n+        return torch.cuda.mem_get_info(device)[0]\n" in diff
    assert "+        return ((current_platform.get_device_total_memory(),) * 2)[0]\n" in diff, diff
    assert any(str(helper) in e for e in cand.evidence), cand.evidence


def test_a_device_call_through_a_module_held_in_a_local_is_the_call_the_traceback_named() -> None:
    """speculators 0.4's helper: ``mod = torch.get_device_module(acc); return mod.mem_get_info()`` — on a CUDA
    build of torch without a GPU the traceback lands in torch/cuda, so that call is the one to guard."""
    import ast as ast_

    from agent.repair.guard_call import makes_call

    def call(text: str) -> ast_.Call:
        node = ast_.parse(text, mode="eval").body
        assert isinstance(node, ast_.Call)
        return node

    assert makes_call(call("torch.cuda.mem_get_info()"), "torch.cuda.mem_get_info")
    assert makes_call(call("mod.mem_get_info()"), "torch.cuda.mem_get_info")
    assert not makes_call(call("torch.mem_get_info()"), "torch.cuda.mem_get_info")
    assert not makes_call(call("mod.empty_cache()"), "torch.cuda.mem_get_info")
    assert not makes_call(call("self.pool.mem_get_info()"), "torch.cuda.mem_get_info")
