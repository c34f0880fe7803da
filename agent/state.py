"""The graph state. Everything here is plain JSON data, so the SQLite checkpointer can keep it and replay
can compare it. Nodes return only the keys they change; lists are replaced whole, never merged. What a repair is
made of (faults, checks, patches, candidates) is in agent/patch_records.py, the launches in agent/launch_records.py.
"""

from __future__ import annotations

from typing import Any, TypedDict

from agent.launch_records import LaunchRecord, ServerRecord
from agent.patch_records import AnswerData, CandidateData, CheckData, CheckResult, FaultData, KeptPatch


class PreflightInfo(TypedDict, total=False):
    """What preflight found on the host (agent/nodes/preflight.py)."""

    versions: dict[str, str]  # package -> installed version in the target env
    site_packages: list[str]  # every folder the target python imports from (library source is read there)
    roots: list[str]  # where patches may go: the env's own site-packages, the workdir, --patch-root
    warnings: list[str]
    python_version: str
    host: str
    canary: dict[str, Any] | None  # the derived canary: run and validate commands, env, outputs moved apart
    wrapped: dict[str, Any] | None  # the server and client a wrapper job runs, as medic read them (tools/wrapper.py)


class ValidationReport(TypedDict, total=False):
    """What a validator printed as JSON (medic's own or the user's): the keys medic reads; others pass through."""

    verified: bool
    readable: bool
    sequences: int
    max_abs_error_per_layer: dict[str, float]
    problems: list[str]


class SessionState(TypedDict, total=False):
    session_id: str
    """The session's id: thread id of the checkpoint, name of the trace, folder on the host."""

    started: float
    """Wall-clock start of the session (epoch seconds), for the wall budget."""

    preflight: PreflightInfo
    """What preflight found: versions, roots, site-packages, warnings."""

    scan_attempted: list[str]
    """Fingerprints of the scan's findings already handed to repair (fixed, or left for the runs)."""

    scan_done: bool
    """True once the scan has no finding left (or is off): the first launch may go ahead."""

    launches: list[LaunchRecord]
    """Every launch, in order."""

    run: LaunchRecord | None
    """The launch being watched, or the last one."""

    fault: FaultData | None
    """The fault being repaired (a Fault as dict)."""

    faults: list[FaultData]
    """Every fault seen, in order, with how it was found (scan, canary, crash, validate, verify)."""

    candidates: list[CandidateData]
    """Candidate patches for the current fault, best first (Candidate as dict)."""

    tried: list[str]
    """Patch ids tried (applied then failed, or rejected) for the current fault."""

    declined: list[str]
    """Patch ids a person said no to (rejected, or the same diff as one rejected): a decision, not a failure."""

    answers: list[AnswerData]
    """Every question a person or a policy answered, in order (agent/answers.py)."""

    proposal: CandidateData | None
    """The candidate about to be applied (approve mode: waiting for a person)."""

    patches: list[KeptPatch]
    """Patches applied and kept, in order: patch, origin, rationale, evidence, checks, fault index."""

    verifications: list[CheckResult]
    """Every check run: patch id, check, ok, detail, when ('before' or 'during_load')."""

    pending_checks: list[CheckData]
    """Checks of the last patch still to run while the next launch loads."""

    outcome: str | None
    """How the session ended: verified | budget | no_repair | rejected | error."""

    outcome_detail: str
    """One line on why it ended so."""

    canary_done: bool
    """True once the canary (the same driver on a tiny model) produced verified output, or when there is none."""

    validation: ValidationReport | None
    """The last validator report (per-layer errors, problems)."""

    wrong_output: str | None
    """The output medic's check found wrong values or rows in: set aside before the next target launch, so that a
    job that resumes computes it again (agent/wrong_output.py)."""

    verified_shards: list[int]
    """A sharded session: the shards whose output is verified (never run again)."""

    resubmits: int
    """Slurm jobs resubmitted as they were after a transient end (node failure, preemption)."""
    servers: list[ServerRecord]
    """Every start of the job's server, in order (two-process jobs only)."""
