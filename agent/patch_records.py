"""What a repair is made of, as the graph state holds it (plain JSON data, like all of agent/state.py): a fault
and its frames, a check and its result, a patch, a candidate, a kept patch and a person's answer."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class CheckResult(TypedDict, total=False):
    """One check run (agent/checks.py): before a relaunch, during its load, or after it ended."""

    patch_id: str
    check: str  # Check.describe()
    ok: bool
    detail: str
    when: str  # "before" | "during_load" | "after_exit"
    phase: str
    launch: int


class FrameData(TypedDict):
    """A FrameRef as the state holds it."""

    file: str
    line: int
    func: str
    code: str


class FindingData(TypedDict):
    """A scan Finding as the state holds it."""

    kind: str
    callee: str
    name: str
    detail: str


class FaultData(TypedDict, total=False):
    """A Fault (agent/repair/types.py) as the state holds it, plus where the fault list places it."""

    stage: str  # scan | canary | crash | validate | verify
    exc_type: str
    message: str
    frames: list[FrameData]
    caller_frames: list[FrameData]
    fingerprint: str
    proc: str | None
    log_excerpt: str
    finding: FindingData | None
    reach: list[str]
    fatal: bool  # a death that is not a Python exception (tools/fatal.py): no code patch is proposed
    output: dict[str, list[int]] | None  # OutputFacts: what medic's own check measured in a wrong output
    warnings: list[str]  # WARNING lines logged before the fault, oldest first
    launch: int | None  # the launch it came from (none for the scan)
    repeated: bool  # the same fingerprint as the fault before it, after a patch
    side: str  # a two-process job: "client" or "server", the process whose fix it needs
    server: int | None  # that job's server load (ServerRecord n) the fault was seen with


class CheckData(TypedDict, total=False):
    """A Check as the state holds it; a queued one names the patch it proves."""

    kind: str
    target: str
    detail: str
    when: str  # "before" | "during_load"
    patch_id: str


class FilePatchData(TypedDict):
    path: str
    diff: str
    sha256_before: str
    sha256_after: str


class EnvEditData(TypedDict, total=False):
    var: str
    action: str  # set | unset | prepend
    value: str
    library: str


class ArgEditData(TypedDict, total=False):
    option: str
    value: str
    command: str  # job | server


class PatchData(TypedDict, total=False):
    """tools.diffs.Patch as JSON (``model_dump(mode="json")``)."""

    id: str
    files: list[FilePatchData]
    rationale: str
    origin: str
    evidence: list[str]
    checks: list[str]
    env: list[EnvEditData]
    host_steps: list[str]
    args: list[ArgEditData]


class CandidateData(TypedDict):
    """A Candidate as the state holds it: the patch and the reasons for it."""

    patch: PatchData
    origin: str  # "playbook:<id>", "derived:<kind>", "llm"
    rationale: str
    evidence: list[str]
    checks: list[CheckData]
    approved_by: NotRequired[str]  # who said yes; a policy rule's name lets medic run host steps
    question: NotRequired[str]  # asked again as another question (agent/answers.py LAUNCH_INTO_FAULT)


class AnswerData(TypedDict, total=False):
    """One question a person (or a policy rule) answered (agent/answers.py): report.md lists them all."""

    at: float  # epoch seconds
    by: str  # the person's login, or policy:<rule>
    question: str  # approve_patch | host_change | launch_into_fault
    patch_id: str
    action: str  # approve | edit | reject; launch (the launch question)
    reason: str
    diff: str  # what was asked about (an edit: the person's diff)
    fault: str  # the fault's summary
    fault_fingerprint: str


class KeptPatch(CandidateData, total=False):
    """A candidate applied and kept, and the fault (index into ``faults``) it answers."""

    fault_index: int
