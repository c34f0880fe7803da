"""What replay keeps while it walks a trace: the state rebuilt so far, the comparisons made, the first divergence
and the recorded settings the routers read; ``ReplayResult`` is what it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from agent.config import SessionConfig
from agent.patch_records import CandidateData, CheckResult
from agent.readers.replay_events import NODE_OF, SILENT, node_of, refused_revert
from agent.readers.tracefile import Event, Trace
from agent.state import SessionState
from tools.errors import TraceError


@dataclass
class ReplayResult:
    events_compared: int
    first_divergence: str | None
    seconds: float
    stopped: str | None = None  # where a trace that does not end (cut, or no exit event) stops, and why
    waits: bool = False  # it stops because the session waits for a person (approve mode): a pause, not a cut

    @property
    def exact(self) -> bool:
        """Replayed to the session's end with no divergence."""
        return self.first_divergence is None and self.stopped is None

    @property
    def exact_to_its_pause(self) -> bool:
        """Every recorded decision replayed, the session still waiting for a person's answer where it stops."""
        return self.first_divergence is None and self.waits


@dataclass
class _RecordedSettings:
    """What the routers read beside the state (agent.deps.Settings): the trace's config, the time it recorded."""

    config: SessionConfig
    replay: ReplayCore

    def clock(self) -> float:
        return self.replay.now


class ReplayCore:
    """The state rebuilt from a trace, the count of comparisons made and the first divergence found."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        try:
            self.config = SessionConfig.model_validate(trace.header.get("config") or {})
        except ValueError as exc:
            raise TraceError(f"{trace.path}: the header's config is not one this medic reads: "
                             f"{str(exc).splitlines()[0]}") from exc
        self.state: SessionState = {}
        self.compared = 0
        # what the current launch's watch will check, as the node queues it (its pending checks, then the host's);
        # a resumed watch queues them again from the checkpoint, so a checks_queued event starts these over
        self.env_expected: list[str] = []
        self.watch_pending: list[str] = []
        self.watch_results: list[CheckResult] = []  # the checks this watch ran: its run_end puts them in the state
        self.divergence: str | None = None
        self.now = 0.0
        self.faults_kept = 0  # fault events the state keeps
        self.proposed: dict[str, CandidateData] = {}  # candidate events by patch id (a rejected one may be asked again)
        self.deps = _RecordedSettings(self.config, self)

    def take(self, update: dict[str, Any]) -> None:
        """A node's own update (its function, called on the recorded results), as LangGraph would merge it."""
        self.state.update(cast(SessionState, update))

    def differ(self, ev: Event, what: str) -> None:
        if self.divergence is None:
            self.divergence = f"event at line {ev.index} ({ev.kind}): {what}"

    def expect(self, ev: Event, router: str, chosen: str, rest: list[Event]) -> None:
        """Compare the router's choice with the node the trace shows ran next."""
        seen = next((node_of(e) for e in rest if e.kind in NODE_OF or e.kind == "resume" or refused_revert(e)), None)
        if seen in (None, "resume"):
            return  # medic stopped here: nothing was observed to compare with
        self.compared += 1
        if chosen != seen and seen not in SILENT.get(chosen, ()):
            self.differ(ev, f"{router} chose {chosen!r}; the recorded session went to {seen!r}")
