"""The repair engine: playbooks first, then repairs derived from the installed source, then (optionally) a model.

Each source of candidates is a plain function ``(ctx, fault) -> list[Candidate]``; the engine asks them in
order and returns every distinct candidate, best first. A candidate already tried for this fault is skipped
by the caller, so a rejected or failed patch makes way for the next one.
"""

from __future__ import annotations

from agent.repair.playbooks import Playbook, load_playbooks, playbook_candidates
from agent.repair.registry import ENVIRONMENT_FIRST, FATAL, LAST_RESORT, PLAYBOOKS, REPAIRS, Repair, repairs_for
from agent.repair.types import Candidate, Fault, NotProven, RepairContext
from tools.errors import MedicError


class RepairEngine:
    def __init__(self, playbooks: list[Playbook] | None = None, fallback: Repair | None = None) -> None:
        self.playbooks = load_playbooks() if playbooks is None else playbooks
        self.fallback = fallback  # the LLM path, when one is configured
        self.notes: list[str] = []  # why a source gave nothing, for the report
        self.stop_reason: str | None = None  # a source's proof that no change medic may make reaches the fault
        self.stop_is_general = False

    def candidates(self, ctx: RepairContext, fault: Fault, *, skip: frozenset[str] = frozenset()) -> list[Candidate]:
        self.notes, self.stop_reason, self.stop_is_general = [], None, False
        if fault.fatal:  # a CUDA/NCCL error or a signal: only a repair that proves the call cannot work here
            return unique([c for name, repair in FATAL for c in self.ask(name, repair, ctx, fault)
                           if c.patch.id not in skip])
        if fault.finding is None:  # an environment's package fault is answered alone: no code patch beside it
            first = [c for name, repair in ENVIRONMENT_FIRST for c in self.ask(name, repair, ctx, fault)]
            if first:
                return unique([c for c in first if c.patch.id not in skip])
        found: list[Candidate] = []
        sources: list[tuple[str, Repair]] = [
            (PLAYBOOKS, lambda c, f: playbook_candidates(c, f, self.playbooks)), *REPAIRS
        ]
        if fault.finding is not None:  # a scan finding goes to the repairs the registry pairs with its detector
            paired = repairs_for(fault.finding.kind)
            sources = [(name, repair) for name, repair in sources if name in paired]
        for name, repair in sources:
            found.extend(self.ask(name, repair, ctx, fault))
        fresh = unique([c for c in found if c.patch.id not in skip])
        if not fresh and fault.finding is None:
            last = [c for name, repair in LAST_RESORT for c in self.ask(name, repair, ctx, fault)]
            fresh = unique([c for c in last if c.patch.id not in skip])
        if not fresh and self.fallback is not None:
            try:
                fresh = unique([c for c in self.fallback(ctx, fault) if c.patch.id not in skip])
            except MedicError as err:
                self.notes.append(f"llm: {err}")
        return fresh

    def ask(self, name: str, repair: Repair, ctx: RepairContext, fault: Fault) -> list[Candidate]:
        try:
            return repair(ctx, fault)
        except NotProven as err:  # what the stop must say (the env's package does not import as shipped, …)
            self.keep_proof(err)
            self.notes.append(f"{name}: {err}")
            return []
        except MedicError as err:
            self.notes.append(f"{name}: {err}")
            return []

    def keep_proof(self, err: NotProven) -> None:
        """The first specific proof is the stop's reason: the engine asks the narrow repairs (one fault kind each)
        before the broad last resorts, and a general proof (it names no cause) gives way to any specific one."""
        if self.stop_reason is None or (self.stop_is_general and not err.general):
            self.stop_reason, self.stop_is_general = str(err), err.general


def unique(candidates: list[Candidate]) -> list[Candidate]:
    seen: set[str] = set()
    out = []
    for cand in candidates:
        if cand.patch.id not in seen:
            seen.add(cand.patch.id)
            out.append(cand)
    return out
