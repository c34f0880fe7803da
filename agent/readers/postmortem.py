"""The postmortem of a session, from its trace alone: what ran, what broke, what was patched, what it cost.

``summarize`` (agent/readers/postmortem_summary.py) turns the events into launches, faults and patches once; the
markdown here and the HTML page (agent/readers/postmortem_html.py) both render that, so the two never disagree. A
canary run loads a tiny model, not the target: its time is reported as canary time, never as target load wasted.
Numbers are rounded for people (agent/record/report.py); the trace keeps them whole.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from agent.answers import answer_lines
from agent.job import script_argument
from agent.readers.postmortem_answers import answers_of
from agent.readers.postmortem_server import server_lines
from agent.readers.postmortem_shards import shard_lines
from agent.readers.postmortem_summary import rationale, summarize
from agent.readers.tracefile import Trace, read_trace
from agent.record.people import Shortener, for_people, without_subject
from agent.record.report import human_seconds
from tools.tracebacks import message_line


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def job_lines(trace: Trace) -> list[str]:
    """The job as the person typed it, and the driver it ran (workdir-relative when it is the workdir's)."""
    target = (trace.header.get("config") or {}).get("target") or {}
    command, workdir = list(target.get("command") or []), str(target.get("workdir") or "")
    if not command:
        return []
    found = script_argument(command, str(target.get("python") or ""))
    sh = shortener(trace)
    driver = f" (driver `{sh.path(found[1])}`)" if found else ""
    return [f"- job: `{_cell(sh.text(shlex.join(command)))}` in `{workdir}` on {target.get('host', 'local')}{driver}"]


def shortener(trace: Trace) -> Shortener:
    """Paths as a person reads them (agent/record/people.py), from the session config the trace's header keeps."""
    return Shortener.for_config(trace.header.get("config"))


def postmortem_markdown(trace: Trace) -> str:
    s, sh = summarize(trace), shortener(trace)
    kinds = f" ({len(s.targets)} target, {len(s.canaries)} canary)" if s.canaries else ""
    out = [f"# Postmortem: medic session {s.session}", "",
           f"**{s.outcome}** — {for_people(s.detail, sh)}", "",
           f"- wall clock: {human_seconds(s.duration)}, {len(s.launches)} launch(es){kinds}, {len(s.faults)} "
           f"fault(s), {len(s.kept)} patch(es) kept" + (f", resumed {s.resumes} time(s)" if s.resumes else ""),
           *job_lines(trace), *[f"- {line}" for line in [*s.loads(), *server_lines(trace)]]]
    out += [f"- the wrong output was set aside before launch L{e.data.get('n')}: `{sh.path(str(aside['from']))}` "
            f"is now `{sh.path(str(aside['to']))}`" for e in trace.events
            if e.kind == "launch" and isinstance(aside := e.data.get("wrong_output_set_aside"), dict)]
    if s.problem:
        out.append(f"- **warning:** {s.problem}")
    out += [f"- warning: {for_people(w, sh)}" for w in s.warnings]
    out += ["", "## Timeline", "", "| # | start | time | phases | outcome | faults | patches after |",
            "|---|---|---|---|---|---|---|"]
    for launch in s.launches:
        phases = ", ".join(f"{k} @{human_seconds(v)}" for k, v in launch.phases.items()) or "-"
        faults = ", ".join(str(f.seq) for f in s.faults if f.launch is launch) or "-"
        nxt = s.launches[launch.seq].start if launch.seq < len(s.launches) else float("inf")
        after = ", ".join(p.id for p in s.patches
                          if p.state not in ("proposed", "rejected") and launch.start < p.at < nxt) or "-"
        how = ", reattached" if launch.reattached else ", started beside the canary" if launch.beside else ""
        label = f"{launch.seq} (L{launch.n}{' canary' if launch.canary else ''}{how})"
        out.append(f"| {label} | +{human_seconds(launch.start)} | {human_seconds(launch.seconds)} | {phases} | "
                   f"{_cell(launch.outcome)} | {faults} | {after} |")
    out += shard_lines(trace)  # a Slurm session: its jobs and shards
    out += ["", "## Faults", "", s.caught_counts(), ""]
    for f in s.faults:
        where = f" at `{sh.text(f.frames[-1])}`" if f.frames else ""
        proc = f" in `{f.proc}`" if f.proc else ""
        which = f" launch {f.launch.seq}" if f.launch else ""
        side = f" {f.side}-side" if f.side else ""
        out.append(f"{f.seq}. [{f.stage}]{which}{side}: `{sh.text(f.said)}`{proc}{where} — caught {f.caught}"
                   + (" (repeated right after its patch)" if f.repeated else ""))
    out += ["", "## Patches", ""]
    for p in s.patches:
        fault = f" for fault {p.fault.seq}" if p.fault else ""
        out += [f"### {p.id} — {p.origin}{fault}: {p.state}" + (f" ({p.why})" if p.why else ""), "",
                rationale(p), "", "```diff", p.diff.rstrip(), "```", ""]
    out += answer_lines(answers_of(trace), lambda text: for_people(text, sh))
    out += ["## Verifications", ""]
    for c in s.checks:
        when = {"before": "before launch", "during_load": "during load"}.get(str(c.get("when")), str(c.get("when")))
        who = f" {c['patch_id']}" if c.get("patch_id") else f" launch {c.get('launch', '?')}"
        check = str(c.get("check", ""))
        detail = message_line(for_people(without_subject(check, str(c.get("detail", ""))), sh, check.split()), 160)
        out.append(f"- {'ok' if c.get('ok') else 'FAILED'} [{when}]{who}: {sh.text(check)} — {detail}")
    out += ["", "## Final diffs (applied, not reverted)", ""]
    out += [f"```diff\n{p.diff.rstrip()}\n```\n" for p in s.kept] or ["(none)", ""]
    out += ["## What is left", "", f"{s.outcome}: {for_people(s.detail, sh)}" if s.outcome != "verified" else
            "nothing: the output was verified against the reference."]
    return "\n".join(out) + "\n"


def print_postmortem(path: Path | str) -> None:
    """Markdown to stdout (``medic run --postmortem``, ``make demo``); a bad trace raises TraceError."""
    text = postmortem_markdown(read_trace(path))
    sys.stdout.write(text)
    sys.stdout.flush()
