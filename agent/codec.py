"""Faults, checks and candidates to and from the plain dicts the graph state holds."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, cast

from agent.patch_records import CandidateData, CheckData, FaultData, PatchData
from agent.repair.types import Candidate, Check, Fault, Finding, FrameRef, OutputFacts
from agent.state import SessionState
from tools.patches import Patch


def fault_to_dict(fault: Fault) -> FaultData:
    return cast(FaultData, asdict(fault))


def fault_from_dict(data: FaultData) -> Fault:
    fields: dict[str, Any] = dict(data)
    fields["frames"] = tuple(FrameRef(**f) for f in data.get("frames", ()))
    fields["caller_frames"] = tuple(FrameRef(**f) for f in data.get("caller_frames", ()))
    fields["warnings"] = tuple(data.get("warnings", ()))
    finding = data.get("finding")
    fields["finding"] = Finding(**cast(dict[str, Any], finding)) if finding else None
    output = data.get("output")
    fields["output"] = OutputFacts.from_report(cast(dict[str, Any], output)) if output else None
    for extra in ("launch", "repeated", "side", "server"):  # what the state adds to a Fault
        fields.pop(extra, None)
    return Fault(**fields)


def check_from_dict(data: CheckData) -> Check:
    fields: dict[str, Any] = {k: v for k, v in data.items() if k != "patch_id"}
    return Check(**fields)  # pending checks name their patch


def check_to_dict(check: Check) -> CheckData:
    return cast(CheckData, asdict(check))


def patch_to_dict(patch: Patch) -> PatchData:
    return cast(PatchData, patch.model_dump(mode="json"))


def candidate_to_dict(cand: Candidate) -> CandidateData:
    return {
        "patch": patch_to_dict(cand.patch),
        "origin": cand.origin,
        "rationale": cand.rationale,
        "evidence": list(cand.evidence),
        "checks": [check_to_dict(c) for c in cand.checks],
    }


def candidate_from_dict(data: CandidateData) -> Candidate:
    return Candidate(
        patch=Patch.model_validate(data["patch"]),
        origin=data["origin"],
        rationale=data["rationale"],
        evidence=tuple(data.get("evidence", ())),
        checks=tuple(check_from_dict(c) for c in data.get("checks", ())),
    )


def patch_diff(data: CandidateData) -> str:
    return "".join(f["diff"] for f in data["patch"].get("files", ()))


def proposal_of(state: SessionState) -> CandidateData:
    """The candidate the routers sent a node with (they route to approve/apply/verify only with one)."""
    proposal = state.get("proposal")
    if proposal is None:
        raise RuntimeError("no proposal in the state: a router sent a node here without one")
    return proposal
