"""The graph state. Everything here is plain JSON data, so the SQLite checkpointer can keep it and replay
can compare it. Nodes return only the keys they change; lists are replaced whole, never merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, Required, TypedDict, cast


class PreflightInfo(TypedDict, total=False):
    """What preflight found on the host (agent/nodes/preflight.py)."""

    versions: dict[str, str]  # package -> installed version in the target env
    site_packages: list[str]  # every folder the target python imports from (library source is read there)
    roots: list[str]  # where patches may go: the env's own site-packages, the workdir, --patch-root
    warnings: list[str]
    python_version: str
    host: str
    canary: dict[str, Any] | None  # the derived canary's run and validate commands
    wrapped: dict[str, Any] | None  # the server and client a wrapper job runs, as medic read them (tools/wrapper.py)


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


class ValidationReport(TypedDict, total=False):
    """What a validator printed as JSON (medic's own or the user's): the keys medic reads; others pass through."""

    verified: bool
    readable: bool
    sequences: int
    max_abs_error_per_layer: dict[str, float]
    problems: list[str]


class ClientOf(TypedDict):
    """A client run of a two-process job (agent/launchers/server.py wraps any launcher): the server it ran against."""

    server: int  # that server's load (ServerRecord n)
    run_dir: str  # that server's run folder: a client whose server ended has ended too
    log_offset: int  # the size of that server's log when the client started (its part of the log)


class LaunchBase(TypedDict, total=False):
    """What every launch has, however it runs."""

    n: Required[int]  # 1-based, one count for the session's launches of every kind
    kind: Required[str]  # "target" | "canary" | "server" (a server that ended before it was ready)
    run_id: str
    run_dir: str
    started: float
    ended: float
    exit_code: int | None
    outcome: str  # "crashed" | "exited" | "stopped:<why>" | "timeout" | "scheduler:<STATE>"
    phases: dict[str, float]  # phase -> seconds since launch when it began
    load_seconds: float | None
    checks_during_load: list[CheckResult]
    failed_patch: str | None  # the patch whose during-load check failed and stopped this launch
    client_of: ClientOf  # a two-process job's client run


class DetachedLaunch(LaunchBase, total=False):
    """One detached process on the job's host (agent/launchers/detached.py)."""

    launcher: Required[Literal["detached"]]


class SlurmLaunch(LaunchBase, total=False):
    """A Slurm job, or job array (agent/launchers/slurm.py)."""

    launcher: Required[Literal["slurm"]]
    job_id: Required[str]
    shards: list[int]  # the array's task ids this launch ran (a sharded session); empty for a plain job
    shard_states: dict[str, str]  # shard -> Slurm state at the end ("COMPLETED", "FAILED", "TIMEOUT", …)
    scheduler_state: str  # the state that decided the outcome (the worst of the shards')
    scheduler_reason: str
    failed_shard: int | None  # the shard whose log diagnose reads


class ShardRunsLaunch(LaunchBase, total=False):
    """A sharded launch as one detached run per shard (agent/launchers/shard_runs.py)."""

    launcher: Required[Literal["shard_runs"]]
    shards: Required[list[int]]
    shard_runs: Required[dict[str, str]]  # shard -> its run folder
    shard_states: dict[str, str]  # shard -> COMPLETED, FAILED, VANISHED (Slurm's words, so relaunches read both)
    failed_shard: int | None


# One shape per launcher, told apart by ``launcher``: a field one way of running has is never read off another.
LaunchRecord = DetachedLaunch | SlurmLaunch | ShardRunsLaunch


def launch_record(raw: Mapping[str, Any]) -> LaunchRecord:
    """A launch record from plain data: a launch event's (replay), or a record written before records had a
    ``launcher`` (a checkpoint of an older medic, resumed). What it holds says which launcher made it."""
    data = {k: v for k, v in raw.items() if k in LAUNCH_KEYS}
    data.setdefault("n", 0)
    data.setdefault("kind", "target")
    if raw.get("server_run_dir"):  # the older flat fields of a client run
        data["client_of"] = {"server": int(raw.get("server") or 0), "run_dir": str(raw["server_run_dir"]),
                             "log_offset": int(raw.get("server_log_offset") or 0)}
    if raw.get("launcher") == "slurm" or raw.get("job_id"):
        return cast(SlurmLaunch, {**data, "launcher": "slurm", "job_id": str(raw.get("job_id") or "")})
    if raw.get("launcher") == "shard_runs" or raw.get("shard_runs"):
        return cast(ShardRunsLaunch, {**data, "launcher": "shard_runs", "shards": list(raw.get("shards") or []),
                                      "shard_runs": dict(raw.get("shard_runs") or {})})
    return cast(DetachedLaunch, {**data, "launcher": "detached"})


LAUNCH_KEYS = frozenset().union(*(t.__annotations__ for t in (DetachedLaunch, SlurmLaunch, ShardRunsLaunch)))


def shards_of(record: LaunchRecord | None) -> list[int]:
    """The shards a launch ran (none for a launch of one process)."""
    if record is None or record["launcher"] == "detached":
        return []
    return list(record.get("shards") or [])


class ServerRecord(TypedDict, total=False):
    """One start of the job's server (a two-process job, agent/launchers/server.py)."""

    n: int  # 1-based server load within the session
    run_dir: str
    port: int
    pid: int | None
    started: float
    ready_seconds: float | None  # launch to a healthy endpoint: the load a client-side fix does not repeat
    outcome: str  # "ready" | "exited" | "timeout" | "stopped" (restarted after a server-side fix)
    clients: int  # client runs served by this load
    log_offset: int  # the server log's size when the last client started
    seconds: float  # launch to ready, exit or the ready timeout
    exit_code: int | None  # how a server that never became ready exited


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

    verified_shards: list[int]
    """A sharded session: the shards whose output is verified (never run again)."""

    resubmits: int
    """Slurm jobs resubmitted as they were after a transient end (node failure, preemption)."""
    servers: list[ServerRecord]
    """Every start of the job's server, in order (two-process jobs only)."""
