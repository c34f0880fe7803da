"""The repair engine: playbooks first, then repairs derived from the installed source, then (optionally) a model.

Each source of candidates is a plain function ``(ctx, fault) -> list[Candidate]``; the engine asks them in
order and returns every distinct candidate, best first. A candidate already tried for this fault is skipped
by the caller, so a rejected or failed patch makes way for the next one.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.repair import derived_calls, derived_dataflow, derived_env, derived_members
from agent.repair.playbooks import Playbook, load_playbooks, playbook_candidates
from agent.repair.types import Candidate, Fault, RepairContext
from tools.errors import MedicError

Repair = Callable[[RepairContext, Fault], list[Candidate]]

# Order matters only among repairs that match the same fault; most match one kind of message each.
DERIVED: tuple[tuple[str, Repair], ...] = (
    ("unexpected_kwarg", derived_calls.unexpected_keyword),
    ("missing_argument", derived_calls.missing_argument),
    ("renamed_member", derived_members.renamed_member),
    ("moved_import", derived_members.moved_import),
    ("changed_return_shape", derived_dataflow.changed_return_shape),
    ("protocol_step", derived_dataflow.mandatory_protocol_step),
    ("environment", derived_env.environment_remedy),
)


class RepairEngine:
    def __init__(self, playbooks: list[Playbook] | None = None, fallback: Repair | None = None) -> None:
        self.playbooks = load_playbooks() if playbooks is None else playbooks
        self.fallback = fallback  # the LLM path, when one is configured
        self.notes: list[str] = []  # why a source gave nothing, for the report

    def candidates(self, ctx: RepairContext, fault: Fault, *, skip: frozenset[str] = frozenset()) -> list[Candidate]:
        self.notes = []
        found: list[Candidate] = []
        sources: list[tuple[str, Repair]] = [
            ("playbooks", lambda c, f: playbook_candidates(c, f, self.playbooks)), *DERIVED
        ]
        for name, repair in sources:
            try:
                found.extend(repair(ctx, fault))
            except MedicError as err:
                self.notes.append(f"{name}: {err}")
        fresh = unique([c for c in found if c.patch.id not in skip])
        if not fresh and self.fallback is not None:
            try:
                fresh = unique([c for c in self.fallback(ctx, fault) if c.patch.id not in skip])
            except MedicError as err:
                self.notes.append(f"llm: {err}")
        return fresh


def unique(candidates: list[Candidate]) -> list[Candidate]:
    seen: set[str] = set()
    out = []
    for cand in candidates:
        if cand.patch.id not in seen:
            seen.add(cand.patch.id)
            out.append(cand)
    return out
