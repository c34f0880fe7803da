"""The live view: one line per thing that matters — phase, load progress and ETA, faults, patches."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from tools.console import make_console

QUIET_KINDS = {"tool", "log_chunk", "llm"}


class View:
    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or make_console(stderr=True, highlight=False)
        self.quiet = quiet
        self._last_progress = -100.0

    def event(self, kind: str, node: str, data: dict[str, Any]) -> None:
        if self.quiet or kind in QUIET_KINDS:
            return
        line = self.describe(kind, data)
        if line:
            self.console.print(line)

    def describe(self, kind: str, data: dict[str, Any]) -> str | None:
        def s(key: str) -> str:
            return escape(str(data.get(key, "")))

        if kind == "phase":
            if data.get("phase") == "loading" and data.get("percent") is not None:
                pct = float(data["percent"])
                if pct - self._last_progress < 25 and pct < 100:
                    return None
                self._last_progress = pct
                eta = f", ETA {float(data['eta']):.0f}s" if data.get("eta") is not None else ""
                return f"  [cyan]loading[/] {pct:.0f}%{eta}"
            self._last_progress = -100.0
            return f"  [cyan]phase[/] {s('phase')}"
        return {
            "preflight": f"[bold]preflight[/] {s('summary')}",
            "scan": f"[bold]scan[/] {s('summary')}",
            "launch": f"[bold]launch {s('n')}[/] ({s('kind')}) "
                      + (f"Slurm job {s('job_id')}" + (f" shards {s('shards')}" if data.get("shards") else "") + " "
                         if data.get("job_id") else "") + s("run_dir"),
            "scheduler": f"  Slurm job {s('job_id')}: {s('state')} ({s('reason')})",
            "resubmit": (f"[red]Slurm ended the job {s('state')} again[/]: resubmits spent" if data.get("given_up")
                         else f"[yellow]resubmit[/] after {s('state')} (no patch), in {s('backoff')}s"),
            "shard": f"  shard {s('shard')} of {s('of')}: "
                     + ("[green]verified[/]" if data.get("verified") else "[red]NOT verified[/]"),
            "server": f"[bold]server S{s('n')}[/] {s('event')}" + (f" port {s('port')}" if data.get("port") else "")
                      + (f" pid {s('pid')}" if data.get("pid") else "")
                      + (f" after {s('seconds')}s" if data.get("seconds") is not None else "")
                      + (f" log {s('log')}" if data.get("log") else ""),
            "run_end": f"  run ended: {s('outcome')} (exit {s('exit_code')}) after {s('seconds')}s",
            "fault": f"[red]fault[/] \\[{s('stage')}] {s('summary')}",
            "candidate": f"  [yellow]candidate[/] {s('origin')}: {s('rationale')}",
            "applied": (f"[green]patched[/] {s('patch_id')} {s('files')}" if data.get("files") else
                        f"[green]environment[/] {s('patch_id')}: {escape('; '.join(map(str, data.get('env') or [])))}"),
            "reverted": f"[yellow]reverted[/] {s('patch_id')}: {s('why')}",
            "patch_refused": f"  [yellow]refused[/] {s('patch_id')}: {s('why')}",
            "no_repair": f"[red]no repair[/] for {s('fault')}: {s('why')}",
            "policy": f"  policy: {s('action')} {s('patch_id')} ({s('by')})",
            "check": f"  check {s('check')}: {'[green]ok[/]' if data.get('ok') else '[red]FAILED[/]'} {s('detail')}",
            "validate": f"[bold]validate[/] {s('summary')}",
            "approval": f"[magenta]waiting for approval[/] of {s('patch_id')}: medic approve {s('session')}",
            "confirm": f"[magenta]launch {s('launch')} waits for a go[/]: medic approve {s('session')} --yes",
            "exit": f"[bold]{s('outcome')}[/]: {s('detail')}",
            "warning": f"[yellow]warning[/] {s('message')}",
        }.get(kind)
