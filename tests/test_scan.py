"""The static scan's rules on copies of pristine speculators 0.3.0, asking the REAL installed vLLM 0.16.0 and
torch (the lab venv): each finds its fault before any launch, the repair engine fixes it, the fixed file
scans clean, and code that already handles the drift is left alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agent.repair.edits import Source
from agent.repair.engine import RepairEngine
from agent.repair.playbooks import load_playbooks
from agent.repair.scan import scan
from agent.repair.scan_members import grafted_member_drift
from agent.repair.scan_playbooks import playbook_drift, predicted_fault
from agent.repair.scan_rules import device_drift, protocol_drift, shape_drift
from agent.repair.types import Fault, FrameRef, RepairContext
from tests.fixtures_lab import GEN, WORKER
from tools.host import LocalHost
from tools.patches import apply_patch

pytestmark = pytest.mark.lab
RULES = {
    "protocol": (protocol_drift, GEN, "State error: sample_tokens() must be called after execute_model()",
                 "self.executor.execute_model(scheduler_output)", "derived:protocol_step"),
    "shape": (shape_drift, GEN, "collective_rpc(unique_reply_rank=...) returns a single value",
              "aux_hidden_states = captured_states_list[0]", "derived:changed_return_shape"),
    "device": (device_drift, GEN, "Found no NVIDIA driver", "free_memory, _ = torch.cuda.mem_get_info()",
               "playbook:cuda-memory-query-off-cuda"),
    "graft": (grafted_member_drift, WORKER, "'LlamaModel' object has no attribute 'get_input_embeddings'",
              "else self.get_input_embeddings(input_ids)", "derived:renamed_member"),
    "playbook": (playbook_drift, GEN, "CacheConfig() leaves enable_prefix_caching to the installed default True",
                 "cache_config = CacheConfig(", "playbook:prefix-caching-breaks-extraction"),
}


def sources(*paths: Path) -> list[Source]:
    return [Source(str(p), p.read_text()) for p in paths]


@pytest.mark.parametrize("name", list(RULES))
def test_each_rule_finds_its_fault_and_the_fixed_file_scans_clean(speculators_copy, name: str) -> None:
    rule, rel, message, line, origin = RULES[name]
    ctx, site = speculators_copy
    path = site / rel
    found = rule(ctx, sources(path))
    assert len(found) == 1, [f.summary for f in found]
    fault = found[0]
    assert fault.stage == "scan" and message in fault.summary
    assert fault.frames[0].file == str(path) and line in fault.frames[0].code
    cands = RepairEngine().candidates(ctx, fault)
    assert cands and cands[0].origin.startswith(origin), [c.origin for c in cands]
    apply_patch(ctx.host, cands[0].patch, roots=ctx.roots, ledger_dir=str(site.parent / "ledger"))
    assert rule(RepairContext(**{**ctx.__dict__, "memo": {}}), sources(path)) == []


def test_the_graft_rule_needs_the_target_architecture(speculators_copy) -> None:
    """No config.json architecture, no class to check against: the canary is left to show it."""
    ctx, site = speculators_copy
    ctx.architectures = ()
    assert grafted_member_drift(ctx, sources(site / WORKER)) == []


CALLER = '''
import types
import torch


def forward(self, input_ids):
    self.parameters()  # torch's nn.Module has it
    return self.embed_input_ids(input_ids)


def guarded():
    if torch.cuda.is_available():
        torch.cuda.mem_get_info()
    free = torch.cuda.mem_get_info() if torch.cuda.is_available() else (0, 0)
    try:
        torch.cuda.synchronize()
    except RuntimeError:
        pass


def early_return():
    if not torch.cuda.is_available():
        return "cpu"
    return torch.cuda.get_device_name(0)


def harmless():
    torch.cuda.empty_cache()  # a no-op without CUDA


class Extension:
    def setup(self):
        base = self.model_runner.model.model
        base.forward = types.MethodType(forward, base)
'''


def test_code_that_already_handles_the_drift_is_left_alone(speculators_copy, tmp_path: Path) -> None:
    ctx, _ = speculators_copy
    caller = tmp_path / "work" / "caller.py"
    caller.parent.mkdir()
    caller.write_text(CALLER)
    found: list[Fault] = []
    for rule in (protocol_drift, shape_drift, device_drift, grafted_member_drift):
        found += rule(ctx, sources(caller))
    assert found == [], [f.summary for f in found]
    # the same graft calling a member LlamaModel lacks is found: the silence above is not blindness
    caller.write_text(CALLER.replace("self.embed_input_ids(", "self.get_input_embeddings("))
    [fault] = grafted_member_drift(ctx, sources(caller))
    assert "'LlamaModel' object has no attribute 'get_input_embeddings'" in fault.summary


def test_each_rule_finds_only_the_kinds_the_registry_pairs_with_it(speculators_copy) -> None:
    """The drift registry is true: every finding a detector makes is of a kind it declares, and the paired
    repairs (and only they) are what the engine asks for it — the test above shows they fix it."""
    from agent.repair.registry import DRIFTS, PLAYBOOKS, REPAIRS, repairs_for

    ctx, site = speculators_copy
    found = {d.detect.__name__: d.detect(ctx, sources(site / GEN, site / WORKER)) for d in DRIFTS}
    for drift in DRIFTS:
        assert all(f.finding is not None and f.finding.kind in drift.finds for f in found[drift.detect.__name__])
        assert set(drift.repaired_by) <= {name for name, _ in REPAIRS} | {PLAYBOOKS}
    kinds = [k for d in DRIFTS for k in d.finds]
    assert len(kinds) == len(set(kinds)), "a finding kind belongs to one detector"
    seen = {f.finding.kind for faults in found.values() for f in faults if f.finding}
    assert {"protocol_step", "return_shape", "device_call", "grafted_member", "playbook"} <= seen
    assert repairs_for("grafted_member") == ("renamed_member",)


class RecordingHost(LocalHost):
    """The real host, with each command it starts kept (how many target-env processes a scan costs)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def run(self, command, **kwargs):  # type: ignore[no-untyped-def]
        self.started.append(command if isinstance(command, str) else " ".join(command))
        return super().run(command, **kwargs)


def test_a_second_pass_asks_the_library_nothing_it_was_told(speculators_copy) -> None:
    """The scan runs again after every patch: the library's answers of the first pass (where vLLM is, its greps,
    signatures, torch's device calls) are not asked again."""
    ctx, site = speculators_copy
    host = RecordingHost()
    ctx.host = host
    first = scan(ctx, str(site / GEN))
    asked = list(host.started)
    second = scan(ctx, str(site / GEN))
    again = host.started[len(asked):]
    assert [f.fingerprint for f in second] == [f.fingerprint for f in first] and first
    probes = [c for c in again if c.endswith(" -B -") or "import torch" in c]
    assert probes == [], probes


def test_a_playbook_predicts_only_a_default_the_installed_callee_really_has(speculators_copy, tmp_path: Path) -> None:
    """The prediction reads the call and the installed default: a call that says the keyword is left alone, so is
    a CacheConfig of the user's own, and so is an installed default that already is the remedy's value."""
    ctx, _ = speculators_copy
    caller = tmp_path / "work" / "caller.py"
    caller.parent.mkdir()
    caller.write_text("from vllm.config import CacheConfig\n\ndef build():\n"
                      "    return CacheConfig(block_size=16, enable_prefix_caching=True)\n")
    assert playbook_drift(ctx, sources(caller)) == []  # said, even if wrongly: no default is left to
    caller.write_text("from vllm.config import CacheConfig\n\ndef build():\n    return CacheConfig(block_size=16)\n")
    [fault] = playbook_drift(ctx, sources(caller))
    assert fault.finding is not None and fault.finding.name == "prefix-caching-breaks-extraction"
    mine = tmp_path / "work" / "mine.py"  # a CacheConfig of the user's own: no playbook speaks of it
    mine.write_text("class CacheConfig:\n    def __init__(self, block_size, enable_prefix_caching=True): ...\n")
    caller.write_text("from mine import CacheConfig\n\ndef build():\n    return CacheConfig(block_size=16)\n")
    assert playbook_drift(ctx, sources(caller)) == []
    # the installed signature as the probe gave it, its default turned to the remedy's value: nothing to predict
    caller.write_text("from vllm.config import CacheConfig\n\ndef build():\n    return CacheConfig(block_size=16)\n")
    sig = ctx.memo["signature:vllm.config:CacheConfig"]
    book = next(b for b in load_playbooks() if b.id == fault.finding.name)
    src = sources(caller)[0]
    call = next(src.calls_named("CacheConfig"))
    assert predicted_fault(book, src, call, sig) is not None
    off = [dataclasses.replace(p, default_src="False") if p.name == "enable_prefix_caching" else p for p in sig.params]
    assert predicted_fault(book, src, call, dataclasses.replace(sig, params=tuple(off))) is None


@pytest.mark.parametrize(("exc_type", "message"), [
    ("RuntimeError", "Found no NVIDIA driver on your system."),
    ("AssertionError", "Torch not compiled with CUDA enabled"),  # torch's _lazy_init on a CPU-only build
])
def test_the_cuda_memory_playbook_knows_both_ways_torch_says_there_is_no_cuda(exc_type: str, message: str) -> None:
    book = next(b for b in load_playbooks() if b.id == "cuda-memory-query-off-cuda")
    fault = Fault("crash", exc_type, message, (FrameRef("/site/torch/cuda/__init__.py", 372, "_lazy_init"),))
    assert book.signature.matches(fault, {"vllm": "0.27.0"})
    assert not book.signature.matches(Fault("crash", "ValueError", message, fault.frames), {"vllm": "0.27.0"})
