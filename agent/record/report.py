"""The session report as markdown, from the graph state alone (so replay and postmortem can render it too).

People read it, so paths are short, seconds and measured errors rounded (agent/record/people.py, which the postmortem
uses too); the state and the trace keep the full values. Diffs keep whole paths: they are for applying.
"""

from __future__ import annotations

from agent.answers import answer_lines
from agent.config import SessionConfig
from agent.patch_records import CandidateData
from agent.record.people import Shortener, for_people, human_number, human_numbers, human_seconds, without_subject
from agent.remedies import run_your_job_with
from agent.state import SessionState
from tools.diffs import EnvEdit
from tools.tracebacks import message_line

__all__ = ["fault_line", "human_number", "human_numbers", "human_seconds", "render_report"]


def fault_line(exc_type: object, message: str, stage: object) -> str:
    """A fault's type and its whole message on one line; medic's own verdicts (validate) rounded for people."""
    text = f"{exc_type}: {message_line(message)}"
    return human_numbers(text) if stage == "validate" else text


def env_lines(patch: CandidateData) -> list[str]:
    return [EnvEdit.model_validate(e).describe() for e in patch["patch"].get("env") or ()]


def render_report(state: SessionState, config: SessionConfig) -> str:
    sh = Shortener.for_config(config.model_dump())
    launches = state.get("launches") or []
    faults = state.get("faults") or []
    patches = state.get("patches") or []
    canaries = sum(1 for launch in launches if launch.get("kind") == "canary")
    kinds = f" ({len(launches) - canaries} target, {canaries} canary)" if canaries else ""
    out = [f"# medic session {config.session_id}", "",
           f"**Outcome: {state.get('outcome') or 'unfinished'}** — {for_people(state.get('outcome_detail') or '', sh)}",
           "",
           f"- target: `{sh.text(' '.join(config.target.command))}` on {config.target.host}",
           f"- launches: {len(launches)}{kinds} (budget {config.budgets.max_launches})",
           f"- faults: {len(faults)}, patches kept: {len(patches)}", ""]
    versions = (state.get("preflight") or {}).get("versions") or {}
    if versions:
        out += ["- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), ""]
    wrapped = (state.get("preflight") or {}).get("wrapped") or {}
    if wrapped.get("server") and wrapped.get("client"):  # what medic's scan and own check read in the user's wrapper
        out += [f"- read through `{sh.path(wrapped['script'])}`: server `{sh.text(' '.join(wrapped['server']))}`, "
                f"client `{sh.text(' '.join(wrapped['client']))}`", ""]
    warned = (state.get("preflight") or {}).get("warnings") or []
    out += [*(f"- warning: {for_people(w, sh)}" for w in warned), *([""] if warned else [])]
    out += ["## Faults, in order", ""]
    for i, fault in enumerate(faults, 1):
        frames = fault.get("frames") or []
        where = f" at `{sh.path(frames[-1]['file'])}:{frames[-1]['line']}`" if frames else ""
        proc = f" in `{fault['proc']}`" if fault.get("proc") else ""
        line = fault_line(fault.get("exc_type"), fault.get("message") or "", fault.get("stage"))
        out.append(f"{i}. [{fault.get('stage')}] launch {fault.get('launch') or '-'}: `{line}`{proc}{where}")
    out += ["", "## Patches", ""]
    for p in patches:
        out += [f"### {p['patch']['id']} ({p['origin']})", "", p.get("rationale") or "(no rationale recorded)", ""]
        if p.get("evidence"):
            out += ["Evidence read:", "", *[f"- `{for_people(e, sh)[:200]}`" for e in p["evidence"]], ""]
        out += ["```diff", "".join(f["diff"] for f in p["patch"]["files"]).rstrip(), "```", ""]
        out += [f"Environment: `{e}`" for e in env_lines(p)] + [f"Host step: `{h}`" for h in
                                                                 p["patch"].get("host_steps") or []]
    out += answer_lines(state.get("answers") or [], lambda text: for_people(text, sh))
    prelude = run_your_job_with(patches, {"job": config.target.command,
                                          "server": config.target.server_command or []})
    if prelude:  # what medic launched the job with, for the person who runs it next without medic
        out += ["## Run your job with", "", "```sh", prelude, "```", ""]
    out += ["## Launches", "", "| # | kind | outcome | exit | time | load | phases |", "|---|---|---|---|---|---|---|"]
    for launch in launches:
        secs = (launch.get("ended") or 0) - (launch.get("started") or 0)
        load = launch.get("load_seconds")
        phases = ", ".join(f"{k} @{human_seconds(v)}" for k, v in (launch.get("phases") or {}).items())
        out.append(f"| {launch.get('n')} | {launch.get('kind') or 'target'} | {launch.get('outcome')} | "
                   f"{launch.get('exit_code')} | {human_seconds(max(secs, 0))} | "
                   f"{human_seconds(load) if load else '-'} | {phases} |")
    checks = state.get("verifications") or []
    if checks:
        out += ["", "## Verifications", ""]
        out += [f"- {'ok' if v['ok'] else 'FAILED'} [{v['when']}] {for_people(v['check'], sh)}: "
                f"{for_people(without_subject(v['check'], v['detail']), sh, v['check'].split())[:160]}" for v in checks]
    if state.get("outcome") != "verified":
        out += ["", "## What is left", "",
                for_people(state.get("outcome_detail") or "", sh) or "the session did not finish"]
    return "\n".join(out) + "\n"
