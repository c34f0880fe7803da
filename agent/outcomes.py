"""How a session ends: one table from outcome to exit code and the one line that says what it means.

``medic run`` and ``medic resume`` exit with these codes; the README's list is this table.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

OutcomeName = Literal["verified", "error", "budget", "no_repair", "waiting", "unverified", "rejected",
                      "host_change", "stopped", "not_found"]


class Outcome(NamedTuple):
    exit_code: int
    meaning: str


OUTCOMES: dict[str, Outcome] = {
    "verified": Outcome(0, "the output was verified (shapes, and values against a reference)"),
    "error": Outcome(1, "medic itself failed: see the trace"),
    # 2 is bad input: a one-line error before anything is created (tools/errors.py UsageError)
    "budget": Outcome(3, "the launch or wall-clock budget is spent"),
    "no_repair": Outcome(4, "a fault that no playbook, derived repair or model could fix"),
    "waiting": Outcome(5, "waiting for a person: `medic approve SESSION`"),
    "unverified": Outcome(6, "the job exited 0 but its output could not be verified"),
    "rejected": Outcome(7, "a person (or a policy) said no to a relaunch"),
    "host_change": Outcome(8, "waiting for a person to change the host: run the step shown, then `medic resume`"),
    # medic itself was stopped (a signal, or it died) before the session ended: nothing is lost
    "stopped": Outcome(9, "medic was stopped before the session ended: `medic resume SESSION` goes on"),
    # the shell found no program the command (or --server, or --validate) names: nothing to patch
    "not_found": Outcome(10, "a program the job names was not found: the report says where medic looked"),
}


def exit_code(outcome: str) -> int:
    return OUTCOMES[outcome].exit_code if outcome in OUTCOMES else 1
