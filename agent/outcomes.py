"""How a session ends: one table from outcome to exit code and the one line that says what it means.

``medic run`` and ``medic resume`` exit with these codes; the README's list is this table.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from tools.errors import BAD_INPUT_EXIT, INTERNAL_ERROR_EXIT

OutcomeName = Literal["verified", "internal_error", "bad_input", "budget", "no_repair", "waiting", "unverified",
                      "rejected", "host_change", "stopped", "not_found"]


# a stop's reason when no source gave one: it names none (the space bench does not count such a stop as honest)
NO_REASON = "no playbook, derived repair or model found a patch"


class Outcome(NamedTuple):
    exit_code: int
    meaning: str


OUTCOMES: dict[str, Outcome] = {
    "verified": Outcome(0, "the output was verified (shapes, and values against a reference)"),
    # a one-line error before anything is created (tools/errors.py UsageError, SessionError, TraceError)
    "bad_input": Outcome(BAD_INPUT_EXIT, "bad input: the one line said what, and nothing was created"),
    "budget": Outcome(3, "the launch or wall-clock budget is spent"),
    "no_repair": Outcome(4, "a fault that no playbook, derived repair or model could fix, or a limit of the "
                                 "installed library (the report says which)"),
    "waiting": Outcome(5, "waiting for a person: `medic approve SESSION`"),
    "unverified": Outcome(6, "the job exited 0 but its output could not be verified"),
    # a person's no is a decision: to every repair of a fault, to a launch into a fault whose repair they
    # rejected, or (--confirm-launch) to a relaunch
    "rejected": Outcome(7, "a person said no: to the repairs of a fault, to launching into it, or to a relaunch"),
    "host_change": Outcome(8, "waiting for a person to change the host: run the step shown, then `medic resume`"),
    # medic itself was stopped (a signal, or it died) before the session ended: nothing is lost
    "stopped": Outcome(9, "medic was stopped before the session ended: `medic resume SESSION` goes on"),
    # medic itself failed (a bug, or a host, disk or database it could not use): never exit 1, never a traceback
    "internal_error": Outcome(INTERNAL_ERROR_EXIT, "medic itself failed: the trace's exit event says where; "
                              "`medic resume SESSION` tries that step again"),
    # the shell found no program the command (or --server, or --validate) names: nothing to patch
    "not_found": Outcome(11, "a program the job names was not found: the report says where medic looked"),
}


def exit_code(outcome: str) -> int:
    return OUTCOMES[outcome].exit_code if outcome in OUTCOMES else INTERNAL_ERROR_EXIT
