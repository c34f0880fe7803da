"""A person's answers are decisions, not failures: what was asked, who said what, and what follows from it.

Every answer (a person's, or a policy rule's) joins the state's ``answers`` with who, when, what, the reason and
the diff, so report.md (rendered from the state) and the postmortem (from the trace) show each question and
its answer. From them follow three rules the repair node keeps:

- a diff a person rejected in this session is never proposed again, under any id (compared by content);
- a scan fault whose repair a person rejected is not launched into silently: medic asks ``LAUNCH_QUESTION``
  (launch anyway, edit the rejected diff, or stop), since the scan showed the line raises and a launch there
  costs a whole load;
- a session whose last repairs a person rejected ends ``rejected`` (exit 7), not ``no_repair``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent.codec import patch_diff
from agent.patch_records import AnswerData, CandidateData, FaultData
from agent.state import SessionState
from tools.diffs import EnvEdit

LAUNCH_QUESTION = "the only repair for a fault that will crash the job was rejected: launch anyway, edit, or stop"
LAUNCH_INTO_FAULT = "launch_into_fault"  # the interrupt's kind, and the proposal's ``question``
LAUNCH_ACTIONS = ("launch", "edit", "reject")  # reject = stop


def content_of(proposal: CandidateData) -> str:
    """What a patch changes, whatever its id: the file diffs, the environment edits, the host steps."""
    env = [EnvEdit.model_validate(e).describe() for e in proposal["patch"].get("env") or ()]
    steps = [f"host step: {s}" for s in proposal["patch"].get("host_steps") or ()]
    return patch_diff(proposal) + "".join(f"{line}\n" for line in [*env, *steps])


def by_a_person(answer: AnswerData | dict[str, Any]) -> bool:
    """A policy rule answers for nobody: its 'no' binds by itself every time it is asked."""
    return not str(answer.get("by") or "").startswith("policy")


def rejected_contents(state: SessionState) -> dict[str, str]:
    """content -> the id a person rejected it under, in this session."""
    return {a.get("diff", ""): a.get("patch_id", "") for a in state.get("answers") or []
            if a.get("action") == "reject" and by_a_person(a) and a.get("question") != LAUNCH_INTO_FAULT}


def entry(at: float, proposal: CandidateData, answer: dict[str, Any], fault: FaultData | None) -> AnswerData:
    """One question and its answer, as the state and the trace keep it."""
    question = proposal.get("question") or ("host_change" if proposal["patch"].get("host_steps")
                                            else "approve_patch")
    return AnswerData(at=at, by=str(answer.get("by") or ""), question=question,
                      patch_id=str(proposal["patch"].get("id") or ""), action=str(answer.get("action") or ""),
                      reason=str(answer.get("reason") or ""), diff=str(answer.get("diff") or content_of(proposal)),
                      fault=summary_of(fault),
                      fault_fingerprint=str((fault or {}).get("fingerprint") or ""))


def summary_of(fault: FaultData | None) -> str:
    """The fault's type and message, as its fault event says it (replay reads it back from there)."""
    return f"{fault.get('exc_type')}: {fault.get('message')}" if fault else ""


def answered(state: SessionState, answer: AnswerData) -> dict[str, Any]:
    """The state update every answer makes: it joins the session's answers; a person's no declines the patch."""
    update: dict[str, Any] = {"answers": [*(state.get("answers") or []), answer]}
    if answer.get("action") == "reject" and by_a_person(answer) and answer.get("question") != LAUNCH_INTO_FAULT:
        update["declined"] = [*(state.get("declined") or []), answer.get("patch_id", "")]
    return update


def launch_chosen(state: SessionState) -> AnswerData | None:
    """The person's 'launch anyway' for the current fault, if they gave one."""
    fault = (state.get("fault") or {}).get("fingerprint")
    return next((a for a in reversed(state.get("answers") or []) if a.get("question") == LAUNCH_INTO_FAULT
                 and a.get("action") == "launch" and a.get("fault_fingerprint") == fault), None)


def declined_by_a_person(state: SessionState) -> list[str]:
    """The current fault's patches a person said no to (directly, or as the same diff rejected before)."""
    tried = set(state.get("tried") or [])
    return [pid for pid in state.get("declined") or [] if pid in tried]


def launch_question(state: SessionState) -> CandidateData | None:
    """The rejected repair of a scan fault, asked about again as 'launch anyway, edit, or stop' — or None when
    no person rejected one, or they already chose to launch."""
    declined = declined_by_a_person(state)
    if not declined or launch_chosen(state) is not None:
        return None
    rejected = next((c for c in reversed(state.get("candidates") or []) if c["patch"].get("id") in declined), None)
    if rejected is None:
        return None
    asked: CandidateData = {**rejected, "question": LAUNCH_INTO_FAULT}
    return asked


def why_nothing_left(state: SessionState, failed: int) -> str:
    """Why the current fault has no repair left, in a person's words: a 'no' is said as one, not as a failure."""
    declined = declined_by_a_person(state)
    rejects = {a.get("patch_id"): a for a in state.get("answers") or [] if a.get("action") == "reject"}
    said = [(f"a person rejected patch {pid}" + (f" ({answer.get('reason')})" if answer.get("reason") else ""))
            if (answer := rejects.get(pid)) is not None else f"patch {pid} is a diff a person rejected before"
            for pid in declined]
    rest = failed - len(declined)
    return "; ".join([*said, *([f"{rest} candidate patch(es) failed"] if rest > 0 else [])])


def confirm_answered(state: SessionState, said: dict[str, Any]) -> dict[str, Any]:
    """--confirm-launch: the go (or no) for a launch joins the answers too."""
    return {"answers": [*(state.get("answers") or []), AnswerData(
        at=float(said.get("at") or 0), by=str(said.get("by") or ""), question="confirm_launch",
        action=str(said.get("action") or ""), reason=str(said.get("reason") or ""),
        patch_id="", diff="", fault=f"launch {said.get('launch')}")]}


def replayed_answer(state: SessionState, said: AnswerData, stand_in: CandidateData | None) -> dict[str, Any]:
    """The update an approval_answer event stands for (agent/readers/replay.py): the answer joins the state, a
    rejected patch is set aside, a stop ends the session; an edit's patch comes with its applied event."""
    update = answered(state, said)
    if said.get("question") != LAUNCH_INTO_FAULT:
        if said.get("action") == "reject":
            update.update(tried=[*(state.get("tried") or []), said.get("patch_id", "")], proposal=None)
        return update
    update["proposal"] = stand_in if said.get("action") == "edit" else None
    if said.get("action") == "reject":
        update.update(outcome="rejected", outcome_detail=f"{said.get('fault')} — {LAUNCH_QUESTION}: "
                      f"{said.get('by') or 'a person'} said stop ({said.get('reason') or 'no reason given'})")
    return update


def asked_again(patch_id: str, proposed: CandidateData | None) -> CandidateData:
    """The launch question's proposal as replay knows it: the rejected candidate, as its event recorded it."""
    rejected: CandidateData = proposed or {"patch": {"id": patch_id, "files": [], "host_steps": []}, "origin": "",
                                           "rationale": "", "evidence": [], "checks": []}
    return {**rejected, "question": LAUNCH_INTO_FAULT}


QUESTIONS = {"approve_patch": "apply this patch?", "host_change": "make this change to the host?",
             LAUNCH_INTO_FAULT: LAUNCH_QUESTION, "confirm_launch": "go ahead with this launch?"}


def answer_lines(answers: list[AnswerData], people: Callable[[str], str]) -> list[str]:
    """The 'Questions and answers' section of report.md and the postmortem: who answered what, when, why, and the
    diff answered (``people`` shortens paths and redacts as the rest of the page does)."""
    if not answers:
        return []
    out = ["## Questions and answers", ""]
    for i, a in enumerate(answers, 1):
        out += [f"{i}. {answer_line(a, people)}"]
        if a.get("diff"):
            out += ["", "   ```diff", *[f"   {line}" for line in str(a["diff"]).rstrip().splitlines()], "   ```"]
        out.append("")
    return out


def answer_line(a: AnswerData, people: Callable[[str], str], bold: str = "**") -> str:
    """One answer on one line: when, the question, about what, the answer, who, why."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(a.get("at") or 0)))
    asked = QUESTIONS.get(str(a.get("question")), str(a.get("question")))
    about = f" (patch `{a['patch_id']}`)" if a.get("patch_id") else ""
    fault = f" for `{people(str(a['fault']))}`" if a.get("fault") else ""
    reason = f": {people(str(a['reason']))}" if a.get("reason") else ""
    return f"{when} — {asked}{about}{fault} — {bold}{a.get('action')}{bold} by {a.get('by') or 'unknown'}{reason}"
