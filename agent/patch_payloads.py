"""What the events of a repair carry (fault, candidate, no_repair, applied/patch_refused/reverted, host_step,
approval, not_proposed, confirm): their payloads in ``PAYLOADS`` (agent/payloads.py)."""

from __future__ import annotations

from typing import Any, TypedDict

Frames = list[str]  # "file:line func", innermost last


class FaultData(TypedDict, total=False):
    stage: str
    summary: str
    proc: str | None
    fingerprint: str
    repeated: bool
    frames: Frames
    side: str | None  # a server job: "server" or "client"
    server: int | None  # the server (S<n>) of the side that failed
    finding: str | None  # the scan's finding kind
    evidence: list[str]  # the validator's failing lines
    facts: dict[str, Any] | None  # OutputFacts: what medic's own check measured in a wrong output


class CandidateData(TypedDict, total=False):
    patch_id: str
    origin: str
    rationale: str
    evidence: Any
    diff: str
    checks: list[Any]
    env: list[str]
    host_steps: list[str]
    args: list[str]  # options set on the job's (or server's) command: "--block-size 16"


class NoRepairData(TypedDict, total=False):
    fault: str
    why: str
    left_for: str
    outcome: str  # an outcome of its own (not_found, rejected), not the plain no_repair
    asks: str  # a scan fault whose repair a person rejected: the question asked next (agent/answers.py)
    patch_id: str  # the rejected patch that question is about


class PatchData(TypedDict, total=False):  # applied, patch_refused, reverted
    patch_id: str
    origin: str
    rationale: str
    files: list[str]
    env: list[str]
    host_steps: list[str]
    args: list[str]
    already_applied: bool
    diff: str
    why: str
    above: str  # reverted: a later patch on the same file, taken off first (stack order)


class HostStepData(TypedDict, total=False):
    patch_id: str
    step: str
    exit_code: int | None


class ApprovalData(TypedDict, total=False):  # approval, approval_answer, approval_refused, policy
    patch_id: str | None
    session: str
    host_steps: list[str]
    action: str | None
    reason: str
    by: str
    why: str
    question: str  # approval_answer: approve_patch | host_change | launch_into_fault; approval: the words asked
    diff: str  # what was answered (an edit: the person's diff)
    at: float
    fault: str
    fault_fingerprint: str


class NotProposedData(TypedDict, total=False):  # not_proposed: a candidate that is a diff a person rejected
    patch_id: str
    same_as: str
    why: str


class ConfirmData(TypedDict, total=False):  # confirm, confirm_answer
    launch: int
    session: str
    action: str | None
    by: str
    reason: str
    at: float
