"""Each repair, one at a time, on a copy of pristine speculators 0.3.0, asking the REAL installed vLLM 0.16.0
(the lab venv) for signatures, call sites and members. Every fault is given as the lab's run reported it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.repair import derived_calls, derived_dataflow, derived_members
from agent.repair.engine import RepairEngine
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from tests.fixtures_lab import GEN, WORKER

pytestmark = pytest.mark.lab


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def one(repair: Callable[[RepairContext, Fault], list[Candidate]], ctx: RepairContext, fault: Fault) -> str:
    found = repair(ctx, fault)
    assert len(found) == 1, f"{repair.__name__} found {len(found)} candidates"
    assert found[0].evidence, "a candidate must say what it read"
    return found[0].patch.diff


CASES = [
    (derived_calls.unexpected_keyword, GEN, "kv_cache_config = get_kv_cache_config_from_groups(",
     "TypeError", "get_kv_cache_config_from_groups() got an unexpected keyword argument 'kv_cache_specs'",
     ["-            kv_cache_specs=kv_cache_spec,"]),
    (derived_calls.missing_argument, GEN, "self.scheduler = Scheduler(",
     "TypeError", "Scheduler.__init__() missing 1 required positional argument: 'block_size'",
     ["+            block_size=self.vllm_config.cache_config.block_size"]),
    (derived_calls.missing_argument, GEN, "scheduler_config=SchedulerConfig(",
     "ValidationError", "1 validation error for SchedulerConfig\nis_encoder_decoder\n  Field required [type=missing]",
     ["+                is_encoder_decoder=False,"]),
    (derived_members.renamed_member, WORKER, "else self.get_input_embeddings(input_ids)",
     "AttributeError", "'LlamaModel' object has no attribute 'get_input_embeddings'",
     ["+            else self.embed_input_ids(input_ids)"]),
    (derived_dataflow.changed_return_shape, GEN, "if not aux_hidden_states:",
     "RuntimeError", "Boolean value of Tensor with more than one value is ambiguous",
     ["-        aux_hidden_states = captured_states_list[0]", "+        aux_hidden_states = captured_states_list"]),
    (derived_dataflow.mandatory_protocol_step, GEN, "self.executor.execute_model(scheduler_output)",
     "RuntimeError", "State error: sample_tokens() must be called after execute_model() returns None.",
     ["+            if model_output is None:", "self.executor.sample_tokens(self.scheduler.get_grammar_bitmask("]),
]


@pytest.mark.parametrize(("repair", "rel", "anchor", "exc", "message", "expected"), CASES,
                         ids=[c[0].__name__ + ":" + c[3] for c in CASES])
def test_each_derived_repair_on_the_real_installed_source(
    speculators_copy, repair, rel, anchor, exc, message, expected
):
    ctx, site = speculators_copy
    path = site / rel
    fault = Fault("crash", exc, message, (FrameRef(str(path), line_of(path, anchor), "f"),))
    diff = one(repair, ctx, fault)
    for piece in expected:
        assert piece in diff, diff


def test_a_misleading_fault_is_not_patched_where_it_raised(speculators_copy) -> None:
    """The block-pool assertion raises inside vLLM; the fix is the caller's CacheConfig (prefix caching off)."""
    ctx, site = speculators_copy
    path = site / GEN
    inner = FrameRef("/x/site-packages/vllm/v1/core/block_pool.py", 238, "cache_full_blocks")
    caller = FrameRef(str(path), line_of(path, "scheduler_output := self.scheduler.schedule()"), "generate")
    fault = Fault("crash", "AssertionError", "", (caller, inner))
    found = RepairEngine().candidates(ctx, fault)
    assert [c.origin for c in found] == ["playbook:prefix-caching-breaks-extraction"]
    assert "+            enable_prefix_caching=False," in found[0].patch.diff
    assert "block_pool.py" not in found[0].patch.diff


def test_no_candidate_for_a_fault_nothing_explains(speculators_copy) -> None:
    ctx, site = speculators_copy
    path = site / GEN
    fault = Fault("crash", "ValueError", "something new", (FrameRef(str(path), 10, "f"),))
    assert RepairEngine().candidates(ctx, fault) == []
