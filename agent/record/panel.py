"""The panel a person sees at a terminal: it stays at the bottom while the events scroll above it.

Session, host and mode; launch n of max (target or canary); the phase, with a bar and an ETA while the model
loads; elapsed time and budget left; faults found, patches and env changes kept; the checks run during this
wait. ``PanelState`` is built from trace events alone (kind, data, timestamp), so ``medic run`` (live, from
Deps.record) and ``medic watch`` (from another process's trace) show the same thing. The ETA comes from the
log's own loading lines when they carry one (agent/nodes/watch.py puts it in the phase event), else from
earlier launches of the same kind in this session, else from earlier sessions of the same command.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table

from agent.patch_payloads import ApprovalData, FaultData, PatchData
from agent.patch_records import CheckResult
from agent.payloads import ChecksQueuedData, ExitData, data_of
from agent.record.people import Shortener, for_people, human_seconds
from agent.record.view import View
from agent.run_payloads import LaunchData, PhaseData, RunEndData

LOADING = ("starting", "importing", "loading")  # the phases before the weights are in memory: the ETA's span
LOADED = ("kv_cache", "warmup", "extracting", "done")
HISTORY_TRACES = 20  # earlier sessions read for load times, newest first
WAITS = {"approval": "waiting for approval", "confirm": "waiting for a go to relaunch",
         "host_step": "waiting for a person to change the host",
         "question": "waiting for a person: launch into a fault whose repair was rejected, edit, or stop?"}


def load_seconds(phases: dict[str, Any]) -> float | None:
    """Seconds from launch to the first phase after loading (as the launch node measures it)."""
    after = [float(v) for k, v in phases.items() if k in LOADED and isinstance(v, int | float)]
    return min(after) if after else None


def earlier_loads(traces_dir: Path, config: dict[str, Any], skip: str) -> list[float]:
    """Target load times of earlier sessions that ran the same command on the same host (newest first)."""
    target = config.get("target") or {}
    key = (target.get("host"), target.get("command"))
    found: list[float] = []
    try:
        paths = sorted(traces_dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    for path in [p for p in paths if p.stem != skip][:HISTORY_TRACES]:
        try:
            lines = path.read_text(errors="replace").splitlines()
            header = json.loads(lines[0]) if lines else {}
        except (OSError, ValueError):
            continue
        other = (header.get("config") or {}).get("target") or {}
        if (other.get("host"), other.get("command")) != key:
            continue
        for line in lines[1:]:
            if '"run_end"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            loaded = load_seconds((event.get("data") or {}).get("phases") or {})
            if event.get("kind") == "run_end" and loaded:
                found.append(loaded)
    return found


@dataclass
class PanelState:
    session: str
    host: str
    mode: str
    max_launches: int
    max_wall: float
    started: float
    shortener: Shortener = field(default_factory=Shortener)
    history: list[float] = field(default_factory=list)  # target loads of earlier sessions
    loads: dict[str, list[float]] = field(default_factory=dict)  # this session's, by launch kind
    launch: int = 0
    role: str = ""  # the launch's: target or canary
    target_launches: int = 0
    launch_started: float = 0.0
    phase: str = "preflight"
    percent: float | None = None
    eta_end: float | None = None  # when the log's own loading lines say the load ends
    faults: int = 0
    kept: dict[str, str] = field(default_factory=dict)  # patch id -> "patch" | "env"
    checks: list[list[str]] = field(default_factory=list)  # [description, "" | "ok" | "FAILED"]
    waiting: str | None = None
    outcome: str | None = None
    ended: float | None = None  # when the session ended or stopped: its elapsed time stops there

    @classmethod
    def for_config(cls, config: dict[str, Any], started: float, history: list[float] | None = None) -> PanelState:
        budgets = config.get("budgets") or {}
        target = config.get("target") or {}
        return cls(session=str(config.get("session_id") or "?"), host=str(target.get("host") or "local"),
                   mode=str(config.get("mode") or "unattended"), max_launches=int(budgets.get("max_launches") or 12),
                   max_wall=float(budgets.get("max_wall") or 4 * 3600.0), started=started,
                   shortener=Shortener.for_config(config), history=list(history or []))

    def apply(self, kind: str, data: dict[str, Any], ts: float) -> None:
        """One trace event, at its own time."""
        if kind == "launch":
            launch = data_of(data, LaunchData)
            self.launch, self.role = int(launch.get("n") or self.launch + 1), str(launch.get("kind") or "target")
            self.target_launches += self.role == "target" and not launch.get("reattached")
            self.launch_started, self.phase, self.percent, self.eta_end = ts, "starting", None, None
            self.checks, self.waiting = [], None
        elif kind == "phase":
            phase = data_of(data, PhaseData)
            self.phase = str(phase.get("phase") or self.phase)
            pct, eta = phase.get("percent"), phase.get("eta")
            self.percent = float(pct) if isinstance(pct, int | float) else self.percent
            if isinstance(eta, int | float):
                self.eta_end = ts + float(eta)
        elif kind == "run_end":
            end = data_of(data, RunEndData)
            self.phase = f"ended: {end.get('outcome') or '?'}"
            loaded = load_seconds(end.get("phases") or {})
            if loaded:
                self.loads.setdefault(self.role or "target", []).append(loaded)
        elif kind == "checks_queued":
            self.checks = [[str(check), ""] for check in data_of(data, ChecksQueuedData).get("checks") or []]
        elif kind == "check" and (check := data_of(data, CheckResult)).get("when") in ("during_load", "after_exit"):
            pending = next((c for c in self.checks if c[0] == check.get("check") and not c[1]), None)
            if pending is not None:
                pending[1] = "ok" if check.get("ok") else "FAILED"
        elif kind == "fault":
            self.faults += 1
            if data_of(data, FaultData).get("stage") == "scan" and not self.launch:
                self.phase = "scan"
        elif kind == "applied":
            patch = data_of(data, PatchData)
            self.kept[str(patch.get("patch_id"))] = "patch" if patch.get("files") else "env"
        elif kind == "reverted":
            self.kept.pop(str(data_of(data, PatchData).get("patch_id")), None)
        elif kind in WAITS:
            asked = data_of(data, ApprovalData)
            self.waiting = WAITS["host_step" if asked.get("host_steps") else "question" if asked.get("question")
                                 else kind]
        elif kind in ("approval_answer", "confirm_answer"):
            self.waiting = None
        elif kind == "resume":  # a stopped or waiting session goes on
            self.waiting, self.outcome, self.ended = None, None, None
        elif kind == "exit":
            self.outcome, self.phase, self.ended = str(data_of(data, ExitData).get("outcome") or "?"), "ended", ts
        elif kind == "stopped":
            self.outcome, self.phase, self.ended, self.waiting = "stopped", "stopped", ts, None
        elif kind in ("preflight", "scan", "validate"):
            self.phase = kind

    def eta(self, now: float) -> float | None:
        """Seconds until the model is loaded, while it loads; None when nothing says."""
        if self.phase not in LOADING or not self.launch or self.outcome:
            return None
        if self.eta_end is not None:
            return max(0.0, self.eta_end - now)
        earlier = self.loads.get(self.role) or (self.history if self.role == "target" else [])
        if earlier:
            return max(0.0, statistics.median(earlier) - (now - self.launch_started))
        return None

    def lines(self, now: float) -> list[str]:
        """The panel as plain text lines (``medic status`` prints these; the live panel lays them out)."""
        head = f"medic {self.session} · {self.host} · {self.mode}"
        if self.launch:
            which = (f"launch {self.target_launches} of {self.max_launches} (target)" if self.role == "target"
                     else f"canary run (launch L{self.launch}; {self.target_launches} of {self.max_launches} "
                          "target launches used)")
        else:
            which = f"no launch yet (budget {self.max_launches})"
        eta = self.eta(now)
        phase = f"phase {self.phase}"
        if self.phase in LOADING and self.launch and not self.outcome:
            phase += f" for {human_seconds(now - self.launch_started)}"
            phase += f", load ETA {human_seconds(eta)}" if eta is not None else ", load ETA unknown (first load)"
        elapsed = (self.ended or now) - self.started
        left = f"{self.max_launches - self.target_launches} launches, {human_seconds(max(self.max_wall - elapsed, 0))}"
        patches = sum(1 for k in self.kept.values() if k == "patch")
        kept = f"faults {self.faults} · kept {patches} patch(es), {len(self.kept) - patches} env change(s)"
        out = [head, f"{which} · {phase}", f"elapsed {human_seconds(elapsed)} · budget left {left}", kept]
        if self.checks:
            out.append(self._checks())
        if self.waiting or self.outcome:
            out.append(self.waiting or f"session {self.outcome}")
        return out

    def _checks(self) -> str:
        """The checks of this wait: how many passed, which failed, which runs now, how many are left."""
        passed = sum(1 for c in self.checks if c[1] == "ok")
        failed = [self._name(c[0]) for c in self.checks if c[1] == "FAILED"]
        pending = [c[0] for c in self.checks if not c[1]]
        parts = [f"{passed} of {len(self.checks)} ok"] + [f"FAILED {name}" for name in failed]
        if pending and not self.phase.startswith("ended"):
            parts.append(f"now {self._name(pending[0])}" + (f", {len(pending) - 1} more" if len(pending) > 1 else ""))
        return "checks this wait: " + " · ".join(parts)

    def _name(self, check: str) -> str:
        return for_people(" ".join(check.split()[:2]), self.shortener)  # kind and target: enough to know it

    def progress(self, now: float) -> float | None:
        """How far the load is, 0..1: the elapsed share of elapsed + ETA, else the log's own percentage."""
        eta = self.eta(now)
        if eta is not None:
            spent = now - self.launch_started
            return spent / (spent + eta) if spent + eta > 0 else 1.0
        return self.percent / 100 if self.percent is not None and self.phase == "loading" else None

    def render(self, now: float) -> RenderableType:
        lines = self.lines(now)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, overflow="ellipsis")
        for line in lines[1:]:
            grid.add_row(escape(line))
        parts: list[RenderableType] = [grid]
        done = self.progress(now)
        if done is not None:
            bar = Table.grid(padding=(0, 1))
            bar.add_row(ProgressBar(total=100, completed=done * 100, width=40), f"{done * 100:.0f}%")
            parts.append(bar)
        return Panel(Group(*parts), title=escape(lines[0]), title_align="left", border_style="cyan")


def at_terminal(console: Console) -> bool:
    """A terminal that can redraw (TERM=dumb cannot): the panel; anything else gets plain lines."""
    return bool(console.is_terminal and not console.is_dumb_terminal)


class LivePanel(View):
    """The view at a terminal: event lines scroll above, the panel stays below (rich Live, redrawn twice a
    second so elapsed time and the ETA move between events)."""

    def __init__(self, state: PanelState, console: Console, clock: Any = time.time) -> None:
        super().__init__(console=console, shortener=state.shortener)
        self.state = state
        self.clock = clock
        self._lock = threading.Lock()
        self._live = Live(console=console, get_renderable=self._render, refresh_per_second=2, transient=False,
                          redirect_stdout=False, redirect_stderr=False)
        self._live.start()

    def _render(self) -> RenderableType:
        with self._lock:
            return self.state.render(self.clock())

    def event(self, kind: str, node: str, data: dict[str, Any], ts: float | None = None) -> None:
        with self._lock:
            self.state.apply(kind, data, self.clock() if ts is None else ts)
        super().event(kind, node, data, ts)

    def stop(self) -> None:
        self._live.refresh()
        self._live.stop()
