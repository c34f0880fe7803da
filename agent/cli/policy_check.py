"""`medic policy-check`: a policy file validated, and what it would decide for each patch of a session."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from agent import store
from agent.cli.approve import console, print_rows
from agent.patch_records import CandidateData
from agent.policy import decide, load_policy, proposal_files
from agent.session_files import load_config
from tools.site_dirs import package_of

if TYPE_CHECKING:  # langgraph is a quarter second of imports the command never needs
    from langgraph.checkpoint.base import CheckpointTuple


def _thread(session_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": session_id}}


def session_proposals(session_id: str) -> list[CandidateData]:
    """Every distinct patch proposed or applied in a session, oldest first, from the checkpoint history."""
    load_config(session_id)  # an unknown session is an error, not an empty list
    seen: dict[str, CandidateData] = {}
    none: list[CheckpointTuple] = []
    history = store.read(lambda saver: list(saver.list(_thread(session_id))), none)  # type: ignore[arg-type]
    for tup in reversed(history):
        values = tup.checkpoint.get("channel_values") or {}
        for prop in [values.get("proposal"), *(values.get("patches") or [])]:
            if isinstance(prop, dict) and prop.get("patch", {}).get("id"):
                seen.setdefault(prop["patch"]["id"], cast(CandidateData, prop))  # the state's own
    return list(seen.values())


def policy_check(
    file: Annotated[Path, typer.Argument(help="the policy file (YAML or TOML)")],
    session: Annotated[str | None, typer.Option(help="show the rule that matches each patch of this session")] = None,
) -> None:
    """Validate a policy file; with --session, show what it would decide for each patch of that session."""
    policy = load_policy(file)
    console.print(f"policy {file}: {len(policy.rules)} rule(s), valid")
    if session is None:
        return
    rows: list[tuple[str, ...]] = []
    for prop in session_proposals(session):
        decision, rule = decide(policy, prop)
        packages = sorted({package_of(p) or "(workdir)" for p in proposal_files(prop)})
        rows.append((prop["patch"]["id"], str(prop.get("origin")), ", ".join(packages), decision,
                     rule.name if rule else "-"))
    print_rows(("patch", "origin", "packages", "decision", "rule"), rows)
