"""Faults, checks and candidates to and from the plain dicts the graph state holds."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from agent.repair.types import Candidate, Check, Fault, Finding, FrameRef
from tools.patches import Patch


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    return asdict(fault)


def fault_from_dict(data: dict[str, Any]) -> Fault:
    fields = dict(data)
    fields["frames"] = tuple(FrameRef(**f) for f in data.get("frames", ()))
    fields["caller_frames"] = tuple(FrameRef(**f) for f in data.get("caller_frames", ()))
    fields["finding"] = Finding(**data["finding"]) if data.get("finding") else None
    for extra in ("launch", "repeated", "side", "server"):  # what the state adds to a Fault
        fields.pop(extra, None)
    return Fault(**fields)


def check_from_dict(data: dict[str, Any]) -> Check:
    return Check(**{k: v for k, v in data.items() if k != "patch_id"})  # pending checks name their patch


def candidate_to_dict(cand: Candidate) -> dict[str, Any]:
    return {
        "patch": cand.patch.model_dump(mode="json"),
        "origin": cand.origin,
        "rationale": cand.rationale,
        "evidence": list(cand.evidence),
        "checks": [asdict(c) for c in cand.checks],
    }


def candidate_from_dict(data: dict[str, Any]) -> Candidate:
    return Candidate(
        patch=Patch.model_validate(data["patch"]),
        origin=data["origin"],
        rationale=data["rationale"],
        evidence=tuple(data.get("evidence", ())),
        checks=tuple(check_from_dict(c) for c in data.get("checks", ())),
    )


def patch_diff(data: dict[str, Any]) -> str:
    return "".join(f["diff"] for f in data["patch"]["files"])
