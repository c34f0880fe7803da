"""The graph state. Everything here is plain JSON data, so the SQLite checkpointer can keep it and replay
can compare it. Nodes return only the keys they change; lists are replaced whole, never merged.
"""

from __future__ import annotations

from typing import Any, TypedDict


class PreflightInfo(TypedDict, total=False):
    """What preflight found on the host (agent/nodes/preflight.py)."""

    versions: dict[str, str]  # package -> installed version in the target env
    site_packages: list[str]  # every folder the target python imports from (library source is read there)
    roots: list[str]  # where patches may go: the env's own site-packages, the workdir, --patch-root
    warnings: list[str]
    python_version: str
    host: str
    canary: dict[str, Any] | None  # the derived canary's run and validate commands


class CheckResult(TypedDict, total=False):
    """One check run (agent/checks.py): before a relaunch, during its load, or after it ended."""

    patch_id: str
    check: str  # Check.describe()
    ok: bool
    detail: str
    when: str  # "before" | "during_load" | "after_exit"
    phase: str
    launch: int


class LaunchRecord(TypedDict, total=False):
    n: int  # 1-based launch number within the session (canary and target counted apart)
    kind: str  # "target" | "canary"
    run_id: str
    run_dir: str
    started: float
    ended: float
    exit_code: int | None
    outcome: str  # "crashed" | "exited" | "stopped:<why>" | "timeout"
    phases: dict[str, float]  # phase -> seconds since launch when it began
    load_seconds: float | None
    checks_during_load: list[CheckResult]
    failed_patch: str | None  # the patch whose during-load check failed and stopped this launch
    server: int  # a client run: the server load (ServerRecord n) it ran against
    server_log_offset: int  # the size of that server's log when the client started (its part of the log)


class ServerRecord(TypedDict, total=False):
    """One start of the job's server (a two-process job, agent/nodes/server.py)."""

    n: int  # 1-based server load within the session
    run_dir: str
    port: int
    pid: int | None
    started: float
    ready_seconds: float | None  # launch to a healthy endpoint: the load a client-side fix does not repeat
    outcome: str  # "ready" | "exited" | "timeout" | "stopped" (restarted after a server-side fix)
    clients: int  # client runs served by this load
    log_offset: int  # the server log's size when the last client started


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

    fault: dict[str, Any] | None
    """The fault being repaired (a Fault as dict)."""

    faults: list[dict[str, Any]]
    """Every fault seen, in order, with how it was found (scan, canary, crash, validate, verify)."""

    candidates: list[dict[str, Any]]
    """Candidate patches for the current fault, best first (Candidate as dict)."""

    tried: list[str]
    """Patch ids tried (applied then failed, or rejected) for the current fault."""

    proposal: dict[str, Any] | None
    """The candidate about to be applied (approve mode: waiting for a person)."""

    patches: list[dict[str, Any]]
    """Patches applied and kept, in order: patch, origin, rationale, evidence, checks, fault index."""

    verifications: list[CheckResult]
    """Every check run: patch id, check, ok, detail, when ('before' or 'during_load')."""

    pending_checks: list[dict[str, Any]]
    """Checks of the last patch still to run while the next launch loads."""

    outcome: str | None
    """How the session ended: verified | budget | no_repair | rejected | error."""

    outcome_detail: str
    """One line on why it ended so."""

    canary_done: bool
    """True once the canary (the same driver on a tiny model) produced verified output, or when there is none."""

    validation: dict[str, Any] | None
    """The last validator report (per-layer errors, problems)."""

    servers: list[ServerRecord]
    """Every start of the job's server, in order (two-process jobs only)."""
