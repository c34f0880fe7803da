"""The live view: one line per thing that matters — phase, load progress and ETA, faults, patches.

Lines are for people (agent/record/people.py: short paths and signatures, rounded numbers); the trace keeps them
whole. On a terminal agent/record/panel.py adds a panel that stays below these lines; off one, this is all there is.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape

from agent.record.people import Shortener, for_people, without_repeat, without_subject
from agent.record.report import human_seconds
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
        def s(key: str, about: str = "") -> str:
            return self.people(data.get(key, ""), about)

        if kind == "phase":
            return self._phase(data)
        if kind == "check":
            check = str(data.get("check", ""))
            detail = without_subject(check, str(data.get("detail", "")))
            verdict = "[green]ok[/]" if data.get("ok") else "[red]FAILED[/]"
            return f"  check {self.people(check, check)}: {verdict} {self.people(detail, check)}".rstrip()
        if kind == "validate":
            self._last_validate = str(data.get("summary", ""))
        if kind == "exit":
            if data.get("outcome") == "internal_error":  # the command's last line says what failed, once
                return f"[bold]internal_error[/] in {escape(str(data.get('node', '?')))}"
            detail = str(data.get("detail", ""))
            if detail and detail == self._last_validate:  # said one line up
                return f"[bold]{escape(str(data.get('outcome', '')))}[/]"
            outcome = str(data.get("outcome", ""))
            rest = without_repeat(outcome, detail)[len(outcome):]  # "verified by …", never "verified: verified"
            return f"[bold]{escape(outcome)}[/]{self.people(rest)}"
        if kind == "fault":
            frames = data.get("frames") or []
            where = f" [dim]at {self.people(str(frames[-1]).split(' ')[0])}[/]" if frames else ""
            return f"[red]fault[/] \\[{s('stage')}] {self.people(str(data.get('summary', '')).strip())}{where}"
        if kind == "run_end":
            seconds = data.get("seconds")
            took = human_seconds(float(seconds)) if isinstance(seconds, int | float) else "?"
            return f"  run ended: {s('outcome')} (exit {s('exit_code')}) after {took}"
        if kind == "applied":
            if data.get("files"):
                files = ", ".join(self.people(f) for f in data["files"])
                return f"[green]patched[/] {s('patch_id')} {files}"
            env = escape("; ".join(map(str, data.get("env") or [])))
            return f"[green]environment[/] {s('patch_id')}: {env}"
        if kind == "approval" and data.get("host_steps"):  # a person changes the host, then resumes: no approve
            steps = escape(" && ".join(map(str, data["host_steps"])))
            return f"[magenta]host step[/]: run `{steps}`, then `medic resume {s('session')}`"
        if kind == "notify":
            verdict = "sent" if data.get("ok") else "[yellow]FAILED[/]"
            return f"  notify ({s('event')}): {verdict} {s('detail')}".rstrip()
        return {
            "preflight": f"[bold]preflight[/] {s('summary')}",
            "scan": f"[bold]scan[/] {s('summary')}",
            "launch": f"[bold]launch {s('n')}[/] ({s('kind')}) "
                      + (f"Slurm job {s('job_id')}" + (f" shards {s('shards')}" if data.get("shards") else "") + " "
                         if data.get("job_id") else f"shards {s('shards')} " if data.get("shards") else "")
                      + s("run_dir"),
            "scheduler": f"  Slurm job {s('job_id')}: {s('state')} ({s('reason')})",
            "resubmit": (f"[red]Slurm ended the job {s('state')} again[/]: resubmits spent" if data.get("given_up")
                         else f"[yellow]resubmit[/] after {s('state')} (no patch), in {s('backoff')}s"),
            "shard": f"  shard {s('shard')} of {s('of')}: "
                     + ("[green]verified[/]" if data.get("verified") else "[red]NOT verified[/]"),
            "server": f"[bold]server S{s('n')}[/] {s('event')}" + (f" port {s('port')}" if data.get("port") else "")
                      + (f" pid {s('pid')}" if data.get("pid") else "")
                      + (f" after {s('seconds')}s" if data.get("seconds") is not None else "")
                      + (f" log {self.people(str(data['log']))}" if data.get("log") else ""),
            "candidate": f"  [yellow]candidate[/] {s('origin')}: {s('rationale')}",
            "reverted": f"[yellow]reverted[/] {s('patch_id')}: {s('why')}",
            "patch_refused": f"  [yellow]refused[/] {s('patch_id')}: {s('why')}",
            "no_repair": f"[red]no repair[/] for {s('fault')}: {s('why')}",
            "policy": f"  policy: {s('action')} {s('patch_id')} ({s('by')})",
            "validate": f"[bold]validate[/] {s('summary')}",
            "approval": f"[magenta]waiting for approval[/] of {s('patch_id')}: medic approve {s('session')}",
            "confirm": f"[magenta]launch {s('launch')} waits for a go[/]: medic approve {s('session')} --yes",
            "warning": f"[yellow]warning[/] {s('message')}",
        }.get(kind)

    def _phase(self, data: dict[str, Any]) -> str | None:
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
