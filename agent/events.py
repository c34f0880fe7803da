"""The trace's vocabulary: every kind of event medic records, in one Literal shared by the writer
(agent/record/trace.py), the live view (agent/record/view.py), replay and the postmortem. mypy holds every
``record(kind, …)`` to it, so a misspelt kind is a type error, not an event nobody reads.
"""

from __future__ import annotations

from typing import Literal, get_args

EventKind = Literal[
    # the session and its host
    "preflight", "warning", "resume", "exit",
    # before any launch
    "scan", "canary",
    # launches
    "launch", "phase", "check", "run_end",
    # a resumed medic's first look at the launch it left: pid, still running or ended
    "reattach",
    # the server of a two-process job: start, ready, reuse, exit
    "server",
    # a Slurm job's scheduler: why it waits, a resubmit after a transient end, a shard verified
    "scheduler", "resubmit", "shard",
    # faults and their remedies (one path, whoever found the fault)
    "fault", "candidate", "no_repair", "approval", "approval_answer", "approval_refused", "policy",
    "not_proposed", "applied", "patch_refused", "reverted", "host_step",
    # relaunch confirmation, output validation
    "confirm", "confirm_answer", "validate", "canary_passed",
    # the model path
    "llm",
    # for people: the checks a launch's wait will run; medic stopped by a signal; a --notify command's result
    "checks_queued", "stopped", "notify",
]
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))
