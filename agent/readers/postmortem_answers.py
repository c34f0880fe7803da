"""The postmortem's questions and answers, from the trace: every answer a person (or a policy) gave, and which
launches a person chose to spend on a fault the scan had found and whose repair they rejected (agent/answers.py).

Such a launch's load is the person's decision, not a crash medic failed to prevent: the postmortem says so
instead of counting it among the loads wasted by a crash after the load.
"""

from __future__ import annotations

from agent.answers import LAUNCH_INTO_FAULT, confirm_answered
from agent.patch_records import AnswerData
from agent.readers.tracefile import Trace


def answers_of(trace: Trace) -> list[AnswerData]:
    """Each approval_answer and confirm_answer event, as the state's answers hold them (traces written before
    answers carried their time take the event's)."""
    out: list[AnswerData] = []
    for ev in trace.events:
        if ev.kind == "approval_answer":
            said = {k: v for k, v in ev.data.items() if k in AnswerData.__annotations__}
            out.append(AnswerData(**{"at": ev.ts, **said}))  # type: ignore[typeddict-item]
        elif ev.kind == "confirm_answer":
            out += confirm_answered({}, {**ev.data, "at": ev.data.get("at", ev.ts)})["answers"]
    return out


def chosen_launches(trace: Trace) -> dict[int, str]:
    """Launch (1-based, in trace order) -> who chose it: the first launch after a 'launch anyway' answer."""
    chosen, by, seq = {}, "", 0
    for ev in trace.events:
        if (ev.kind == "approval_answer" and ev.data.get("question") == LAUNCH_INTO_FAULT
                and ev.data.get("action") == "launch"):
            by = str(ev.data.get("by") or "a person")
        elif ev.kind == "launch":
            seq += 1
            if by:
                chosen[seq], by = by, ""
    return chosen
