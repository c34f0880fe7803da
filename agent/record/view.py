"""The live view: one line per thing that matters — phase, load progress and ETA, faults, patches.

Lines are for people (agent/record/people.py: short paths and signatures, rounded numbers); the trace keeps them
whole. On a terminal agent/record/panel.py adds a panel that stays below these lines; off one, this is all there is.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape

from agent.patch_payloads import (
    ApprovalData,
    CandidateData,
    ConfirmData,
    FaultData,
    NoRepairData,
    NotProposedData,
    PatchData,
)
from agent.patch_records import CheckResult
from agent.payloads import (
    ExitData,
    MessageData,
    NotifyData,
    PreflightData,
    ReattachData,
    ScanData,
    ValidateData,
    data_of,
)
from agent.record.people import Shortener, for_people, without_repeat, without_subject
from agent.record.report import human_seconds
from agent.run_payloads import LaunchData, PhaseData, ResubmitData, RunEndData, SchedulerData, ServerData, ShardData
from tools.console import make_console

QUIET_KINDS = {"llm", "checks_queued"}
PROGRESS_EVERY = 10.0  # seconds between two load-progress lines (a 20-minute load says how far it is)


class View:
    def __init__(self, console: Console | None = None, quiet: bool = False,
                 shortener: Shortener | None = None) -> None:
        self.console = console or make_console(stderr=True, highlight=False)
        self.quiet = quiet
        self.shortener = shortener or Shortener()
        self._last_progress = (-100.0, 0.0)  # (percent, when) of the last load-progress line
        self._last_validate = ""

    def event(self, kind: str, node: str, data: dict[str, Any], ts: float | None = None) -> None:
        """One event as a line (``ts``, when it was recorded, matters to the panel only)."""
        if self.quiet or kind in QUIET_KINDS:
            return
        line = self.describe(kind, data)
        if line:
            self.console.print(line)

    def people(self, text: object, about: str = "") -> str:
        """``text`` for a person, markup-escaped: short paths and signatures, rounded numbers."""
        return escape(for_people(str(text), self.shortener, about.split()))

    def describe(self, kind: str, data: dict[str, Any]) -> str | None:
        """The line for one event, read through its kind's payload type (agent/payloads.py); None: no line."""
        p = self.people
        if kind == "phase":
            return self._phase(data_of(data, PhaseData))
        if kind == "check":
            check = data_of(data, CheckResult)
            name = str(check.get("check", ""))
            detail = without_subject(name, str(check.get("detail", "")))
            verdict = "[green]ok[/]" if check.get("ok") else "[red]FAILED[/]"
            return f"  check {p(name, name)}: {verdict} {p(detail, name)}".rstrip()
        if kind == "validate":
            validated = data_of(data, ValidateData)
            self._last_validate = str(validated.get("summary", ""))
            return f"[bold]validate[/] {p(validated.get('summary', ''))}"
        if kind == "exit":
            return self._exit(data_of(data, ExitData))
        if kind == "fault":
            fault = data_of(data, FaultData)
            frames = fault.get("frames") or []
            where = f" [dim]at {p(str(frames[-1]).split(' ')[0])}[/]" if frames else ""
            return f"[red]fault[/] \\[{p(fault.get('stage', ''))}] {p(str(fault.get('summary', '')).strip())}{where}"
        if kind == "run_end":
            end = data_of(data, RunEndData)
            seconds = end.get("seconds")
            took = human_seconds(float(seconds)) if isinstance(seconds, int | float) else "?"
            return f"  run ended: {p(end.get('outcome', ''))} (exit {p(end.get('exit_code', ''))}) after {took}"
        if kind in ("applied", "reverted", "patch_refused"):
            return self._patch(kind, data_of(data, PatchData))
        if kind in ("approval", "policy"):
            answer = data_of(data, ApprovalData)
            if kind == "policy":
                return (f"  policy: {p(answer.get('action', ''))} {p(answer.get('patch_id', ''))} "
                        f"({p(answer.get('by', ''))})")
            if answer.get("question"):  # not a patch: whether to launch into a fault whose repair was rejected
                return (f"[magenta]asks[/]: {p(answer.get('question', ''))}: medic approve "
                        f"{p(answer.get('session', ''))} --launch | --edit | --reject REASON")
            if answer.get("host_steps"):  # a person changes the host, then resumes: no approve
                steps = escape(" && ".join(map(str, answer.get("host_steps") or [])))
                return f"[magenta]host step[/]: run `{steps}`, then `medic resume {p(answer.get('session', ''))}`"
            return (f"[magenta]waiting for approval[/] of {p(answer.get('patch_id', ''))}: "
                    f"medic approve {p(answer.get('session', ''))}")
        if kind == "launch":
            return self._launch(data_of(data, LaunchData))
        if kind == "server":
            return self._server(data_of(data, ServerData))
        return self._other(kind, data)

    def _exit(self, end: ExitData) -> str:
        outcome, detail = str(end.get("outcome", "")), str(end.get("detail", ""))
        if outcome == "internal_error":  # the command's last line says what failed, once
            return f"[bold]internal_error[/] in {escape(str(end.get('node', '?')))}"
        if detail and detail == self._last_validate:  # said one line up
            return f"[bold]{escape(outcome)}[/]"
        rest = without_repeat(outcome, detail)[len(outcome):]  # "verified by …", never "verified: verified"
        return f"[bold]{escape(outcome)}[/]{self.people(rest)}"

    def _patch(self, kind: str, patch: PatchData) -> str:
        p, pid = self.people, self.people(patch.get("patch_id", ""))
        if kind == "reverted":
            return f"[yellow]reverted[/] {pid}: {p(patch.get('why', ''))}"
        if kind == "patch_refused":
            return f"  [yellow]refused[/] {pid}: {p(patch.get('why', ''))}"
        if patch.get("files"):
            return f"[green]patched[/] {pid} {', '.join(p(f) for f in patch.get('files') or [])}"
        return f"[green]environment[/] {pid}: {escape('; '.join(map(str, patch.get('env') or [])))}"

    def _launch(self, launch: LaunchData) -> str:
        p = self.people
        how = (f"Slurm job {p(launch['job_id'])}" + (f" shards {p(launch.get('shards'))}" if launch.get("shards")
                                                     else "") + " " if launch.get("job_id")
               else f"shards {p(launch.get('shards'))} " if launch.get("shards") else "")
        return (f"[bold]launch {p(launch.get('n', ''))}[/] ({p(launch.get('kind', ''))}) "
                f"{how}{p(launch.get('run_dir', ''))}")

    def _server(self, server: ServerData) -> str:
        p = self.people
        return (f"[bold]server S{p(server.get('n', ''))}[/] {p(server.get('event', ''))}"
                + (f" port {p(server.get('port'))}" if server.get("port") else "")
                + (f" pid {p(server.get('pid'))}" if server.get("pid") else "")
                + (f" after {p(server.get('seconds'))}s" if server.get("seconds") is not None else "")
                + (f" log {p(server.get('log'))}" if server.get("log") else ""))

    def _other(self, kind: str, data: dict[str, Any]) -> str | None:
        p = self.people
        if kind == "scheduler":
            job = data_of(data, SchedulerData)
            return f"  Slurm job {p(job.get('job_id', ''))}: {p(job.get('state', ''))} ({p(job.get('reason', ''))})"
        if kind == "resubmit":
            again = data_of(data, ResubmitData)
            return (f"[red]Slurm ended the job {p(again.get('state', ''))} again[/]: resubmits spent"
                    if again.get("given_up")
                    else f"[yellow]resubmit[/] after {p(again.get('state', ''))} (no patch), "
                         f"in {p(again.get('backoff', ''))}s")
        if kind == "shard":
            shard = data_of(data, ShardData)
            return (f"  shard {p(shard.get('shard', ''))} of {p(shard.get('of', ''))}: "
                    + ("[green]verified[/]" if shard.get("verified") else "[red]NOT verified[/]"))
        if kind == "notify":
            sent = data_of(data, NotifyData)
            verdict = "sent" if sent.get("ok") else "[yellow]FAILED[/]"
            return f"  notify ({p(sent.get('event', ''))}): {verdict} {p(sent.get('detail', ''))}".rstrip()
        if kind == "candidate":
            cand = data_of(data, CandidateData)
            return f"  [yellow]candidate[/] {p(cand.get('origin', ''))}: {p(cand.get('rationale', ''))}"
        if kind == "reattach":
            found = data_of(data, ReattachData)
            pid = f" (pid {p(found.get('pid'))})" if found.get("pid") else ""
            what = {"running": "is still running: following it",
                    "exited": f"ended (exit {p(found.get('exit_code'))}) while medic was away: reading its log"}.get(
                str(found.get("state")), "is gone (no exit code): reading what it left")
            launch = f"launch {p(found.get('launch', ''))} ({p(found.get('kind', ''))}){pid}"
            return f"[bold]resumed[/]: found {launch} {what}"
        if kind == "approval_answer":
            said = data_of(data, ApprovalData)
            why = f" ({p(said.get('reason', ''))})" if said.get("reason") else ""
            return f"  [magenta]answer[/] from {p(said.get('by', ''))}: {p(said.get('action', ''))}{why}"
        if kind == "not_proposed":
            same = data_of(data, NotProposedData)
            return f"  not proposed again: {p(same.get('patch_id', ''))} is {p(same.get('why', ''))}"
        if kind == "no_repair":
            none = data_of(data, NoRepairData)
            return f"[red]no repair[/] for {p(none.get('fault', ''))}: {p(none.get('why', ''))}"
        if kind == "confirm":
            confirm = data_of(data, ConfirmData)
            return (f"[magenta]launch {p(confirm.get('launch', ''))} waits for a go[/]: "
                    f"medic approve {p(confirm.get('session', ''))} --yes")
        if kind in ("preflight", "scan"):
            summary = data_of(data, PreflightData if kind == "preflight" else ScanData).get("summary", "")
            return f"[bold]{kind}[/] {p(summary)}"
        if kind == "warning":
            return f"[yellow]warning[/] {p(data_of(data, MessageData).get('message', ''))}"
        return None

    def _phase(self, data: PhaseData) -> str | None:
        """A phase once; a load's progress at most every PROGRESS_EVERY seconds, never its 100% (the next
        phase says that): a one-shard load is one line, not "0%" and "100%, ETA 0s"."""
        eta = data.get("eta")
        eta_text = f", ETA {human_seconds(float(eta))}" if isinstance(eta, int | float) and eta > 0 else ""
        pct = data.get("percent")
        if data.get("phase") == "loading" and isinstance(pct, int | float):
            last_pct, last_at = self._last_progress
            now = time.monotonic()
            if pct >= 100 or pct <= last_pct or now - last_at < PROGRESS_EVERY:
                return None
            self._last_progress = (float(pct), now)
            return f"  [cyan]loading[/] {pct:.0f}%{eta_text}"
        self._last_progress = (-100.0, time.monotonic()) if data.get("phase") == "loading" else (-100.0, 0.0)
        return f"  [cyan]phase[/] {escape(str(data.get('phase', '')))}{eta_text}"
