"""report: always the last node. Faults in order with their root cause, each patch and why, launches, time
per phase, what is left. Written to the session folder; the exit event closes the trace."""

from __future__ import annotations

from typing import Any

from agent.config import medic_home
from agent.deps import Deps
from agent.record.report import render_report
from agent.state import SessionState
from tools.errors import HostError, RunError


def report(state: SessionState, deps: Deps) -> dict[str, Any]:
    end_runs(state, deps)
    outcome = state.get("outcome") or "internal_error"
    detail = state.get("outcome_detail") or ""
    text = render_report(state, deps.config)
    folder = medic_home() / "sessions" / deps.config.session_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "report.md"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(deps.trace.redactor.text(text))
    tmp.replace(path)
    deps.record("exit", "report", {"outcome": outcome, "detail": detail, "report": str(path),
                                   "launches": len(state.get("launches") or []),
                                   "patches": [p["patch"]["id"] for p in state.get("patches") or []]})
    return {"outcome": outcome, "outcome_detail": detail}


def end_runs(state: SessionState, deps: Deps) -> None:
    """Before the report says the session ended, nothing of its runs may be left (the launcher knows them all)."""
    try:
        deps.launcher.end(state)
    except (RunError, HostError) as err:  # the report still gets written; the trace says what may be left
        deps.record("warning", "report", {"message": f"could not make sure every run has ended: {err}"})
