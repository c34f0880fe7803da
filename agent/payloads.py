"""What each event of the trace carries: one TypedDict per ``EventKind`` (agent/events.py), in ``PAYLOADS``.

The writer (``Deps.record``, agent/record/trace.py) checks every event against its payload when
``MEDIC_STRICT_EVENTS`` is set (the test suite sets it), so a key nobody declared fails a test instead of being a
field no reader knows; the readers (live view, panel, postmortem, replay) read ``data_of(event, Kind)``. Every
payload is ``total=False``: a trace written by an older medic lacks keys, and a reader must say so, not crash.
A launch's payloads are in agent/run_payloads.py, a repair's in agent/patch_payloads.py.
"""

from __future__ import annotations

import os
import types
from typing import Any, Literal, TypedDict, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from agent.events import EventKind
from agent.patch_payloads import (
    ApprovalData,
    CandidateData,
    ConfirmData,
    FaultData,
    HostStepData,
    NoRepairData,
    NotProposedData,
    PatchData,
)
from agent.patch_records import CheckResult
from agent.run_payloads import LaunchData, PhaseData, ResubmitData, RunEndData, SchedulerData, ServerData, ShardData


class PreflightData(TypedDict, total=False):
    summary: str
    versions: dict[str, Any]
    site_packages: list[str]
    roots: list[str]
    warnings: list[str]
    python_version: str
    host: str
    canary: dict[str, Any] | None
    wrapped: dict[str, Any] | None  # what medic read through the job's own wrapper (tools/wrapper.py)


class MessageData(TypedDict, total=False):  # warning
    message: str


class ResumeData(TypedDict, total=False):
    pid: int


class ReattachData(TypedDict, total=False):
    launch: int
    kind: str
    pid: int | None
    state: str  # running | exited | vanished (tools/runs.py)
    exit_code: int | None


class ExitData(TypedDict, total=False):
    outcome: str
    detail: str
    report: str
    launches: int
    patches: list[str]
    node: str  # internal_error: the step that failed (medic resume runs it again)
    error: str
    traceback: str


class ScanData(TypedDict, total=False):
    summary: str
    findings: int
    repaired: int
    stopped: str  # why the scan ended before reading everything (the host did not answer): the launches go on


class CanaryData(TypedDict, total=False):
    model: str | None
    canary: str
    named: str  # how the job named the model folder (tools/model_folder.py)
    via: str


class ValidateData(TypedDict, total=False):
    summary: str
    verified: bool
    report: Any
    exit_code: int | None
    builtin: bool
    interpreter: dict[str, Any]
    script: dict[str, Any]


class LaunchRefData(TypedDict, total=False):  # canary_passed
    launch: int | None


class LlmData(TypedDict, total=False):
    endpoint: str
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    malformed_calls: int
    refused_patches: int
    transcript: list[Any]
    protocol: str  # tool calls, or JSON in the content where the server refuses them
    protocol_note: str
    proposals: int
    candidates: list[str]
    rejections: list[Any]  # each garbage answer and its named reason


class ChecksQueuedData(TypedDict, total=False):
    launch: int
    checks: list[str]


class StoppedData(TypedDict, total=False):
    signal: str
    pid: int  # the medic process that was stopped


class NotifyData(TypedDict, total=False):
    event: str
    outcome: str
    ok: bool
    detail: str


PAYLOADS: dict[str, type] = {
    "preflight": PreflightData, "warning": MessageData, "resume": ResumeData, "exit": ExitData,
    "reattach": ReattachData,
    "scan": ScanData, "canary": CanaryData,
    "launch": LaunchData, "phase": PhaseData, "check": CheckResult, "run_end": RunEndData,
    "server": ServerData, "scheduler": SchedulerData, "resubmit": ResubmitData, "shard": ShardData,
    "fault": FaultData, "candidate": CandidateData, "no_repair": NoRepairData,
    "approval": ApprovalData, "approval_answer": ApprovalData, "approval_refused": ApprovalData,
    "policy": ApprovalData, "not_proposed": NotProposedData, "applied": PatchData, "patch_refused": PatchData,
    "reverted": PatchData,
    "host_step": HostStepData, "confirm": ConfirmData, "confirm_answer": ConfirmData, "validate": ValidateData,
    "canary_passed": LaunchRefData, "llm": LlmData, "checks_queued": ChecksQueuedData, "stopped": StoppedData,
    "notify": NotifyData,
}

P = TypeVar("P")


def data_of(data: dict[str, Any], payload: type[P]) -> P:
    """A reader's typed view of an event's data (checked at write time, so a cast, not a copy)."""
    return cast(P, data)


def _fits(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_fits(value, h) for h in get_args(hint))
    if origin is Literal:
        return value in get_args(hint)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    base = origin or hint
    if base is list:  # a tuple is written as a JSON list
        return isinstance(value, list | tuple)
    return isinstance(value, base) if isinstance(base, type) else True


def payload_problems(kind: str, data: dict[str, Any]) -> list[str]:
    """What in ``data`` its kind's payload does not declare, or declares with another type."""
    hints = get_type_hints(PAYLOADS[kind])
    problems = [f"{kind}: undeclared key {key!r}" for key in data if key not in hints]
    problems += [f"{kind}: {key}={data[key]!r:.80} is not {hints[key]}" for key in data
                 if key in hints and not _fits(data[key], hints[key])]
    return problems


def check_payload(kind: EventKind, data: dict[str, Any]) -> None:
    """Raise on a payload that does not fit, when ``MEDIC_STRICT_EVENTS`` is set (tests); otherwise nothing."""
    if os.environ.get("MEDIC_STRICT_EVENTS") and (problems := payload_problems(kind, data)):
        raise TypeError("; ".join(problems))
