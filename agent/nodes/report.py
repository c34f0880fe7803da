"""report: always the last node. Faults in order with their root cause, each patch and why, launches, time
per phase, what is left. Written to the session folder; the exit event closes the trace."""

from __future__ import annotations

from typing import Any

from agent.config import medic_home
from agent.deps import Deps
from agent.nodes.launch import end_runs
from agent.record.report import render_report
from agent.state import SessionState


def report(state: SessionState, deps: Deps) -> dict[str, Any]:
    end_runs(state, deps)  # before the report says the session ended, nothing of its runs may be left
    outcome = state.get("outcome") or "error"
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
