"""`medic sessions`, `medic approve`: a person's side of approve mode (`medic policy-check` is in policy_check.py).

Listing and showing read the checkpoint directly (no graph, no host connection); only an answer resumes the
session, through run_session, so the lock, the trace and the exit code are the same as for `medic run`.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict, cast

import typer
from rich.syntax import Syntax
from rich.table import Table
from typing_extensions import TypeIs

from agent.answers import LAUNCH_INTO_FAULT, LAUNCH_QUESTION
from agent.cli.live import drive
from agent.cli.run import finish
from agent.codec import patch_diff
from agent.config import SessionConfig, medic_home
from agent.patch_records import CandidateData
from agent.session_files import load_config, read_failure
from tools.console import make_console
from tools.diffs import ArgEdit, EnvEdit
from tools.errors import MedicError, SessionError, UsageError
from tools.host import Host

console = make_console(stderr=True, highlight=False)


# -- reading sessions from the checkpoint --------------------------------------------------------------
class LaunchWait(TypedDict):
    """--confirm-launch: the next launch waits for a person."""

    confirm_launch: int
    patches: list[str]


Waiting = CandidateData | LaunchWait


def waits_for_launch(waiting: Waiting) -> TypeIs[LaunchWait]:
    return "confirm_launch" in waiting


def read_session(session_id: str) -> tuple[dict[str, Any], Waiting | None]:
    """(state values, the pending approval's proposal or None) from the latest checkpoint."""
    from agent.session import read_checkpoint  # the session graph: a second of imports
    values, waiting = read_checkpoint(session_id)
    if waiting is not None and waiting.get("kind") in ("approve_patch", "host_change", LAUNCH_INTO_FAULT):
        return values, cast(CandidateData, waiting.get("proposal") or {})  # the checkpoint holds the state's
    if waiting is not None and waiting.get("kind") == "confirm_launch":
        launch = LaunchWait(confirm_launch=int(waiting.get("launch") or 0), patches=list(waiting.get("patches") or []))
        return values, launch
    return values, None


def status_line(values: dict[str, Any], proposal: Waiting | None) -> str:
    if proposal is not None and waits_for_launch(proposal):
        return f"waiting: confirm launch {proposal['confirm_launch']}"
    if proposal is not None and proposal["patch"].get("host_steps"):  # a person changes the host, then resumes
        return f"waiting: run `{' && '.join(proposal['patch']['host_steps'])}`, then `medic resume`"
    if proposal is not None and proposal.get("question"):
        return f"waiting: {LAUNCH_QUESTION} (patch {proposal['patch'].get('id')})"
    if proposal is not None:
        return f"waiting: patch {proposal['patch'].get('id')} ({proposal.get('origin')})"
    if not values:
        return "not started"
    if values.get("outcome"):
        return str(values["outcome"])
    return "unfinished: `medic resume` continues it"


def sessions() -> None:
    """List sessions: id, mode, and how each ended or what it waits for."""
    folder = medic_home() / "sessions"
    ids = sorted(p.name for p in folder.iterdir() if (p / "config.json").exists()) if folder.is_dir() else []
    if not ids:
        console.print(f"no sessions under {medic_home()}")
        return
    rows: list[tuple[str, ...]] = []
    for sid in ids:
        try:
            mode: str = load_config(sid).mode
            failed = read_failure(sid)  # medic's own failure ended its last run: say so, not "unfinished"
            status = str(failed.get("detail")) if failed else status_line(*read_session(sid))
        except (MedicError, ValueError) as err:  # one damaged session must not hide the others
            mode, status = "?", f"unreadable: {' '.join(str(err).split())[:160]}"
        rows.append((sid, mode, status))
    print_rows(("session", "mode", "status"), rows)


def print_rows(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """A table at a terminal; tab-separated lines, never cut, for a pipe or a script."""
    out = make_console(highlight=False)
    if not out.is_terminal:
        for row in rows:
            print("\t".join(row))
        return
    table = Table(*header, box=None)
    for row in rows:
        table.add_row(*row)
    out.print(table)


# -- approving ---------------------------------------------------------------------------------------
def waiting_proposal(session_id: str, patch: str | None) -> tuple[SessionConfig, Waiting]:
    """The session's config and the proposal it waits on; SessionError if it waits on nothing or on another."""
    config = load_config(session_id)
    values, proposal = read_session(session_id)
    if proposal is None:
        raise SessionError(f"session {session_id} is not waiting for an approval ({status_line(values, None)})")
    if patch is not None and waits_for_launch(proposal):
        raise SessionError(f"session {session_id} waits to confirm launch {proposal['confirm_launch']}, not a patch")
    pid = "" if waits_for_launch(proposal) else str(proposal["patch"].get("id"))
    if patch is not None and not (len(patch) >= 4 and pid.startswith(patch)):
        raise SessionError(f"session {session_id} waits for patch {pid}, not {patch!r}: `medic sessions` shows it")
    return config, proposal


def show_proposal(proposal: CandidateData) -> None:
    patch = proposal["patch"]
    out = make_console(highlight=False)
    out.print(f"[bold]patch {patch.get('id')}[/] — {proposal.get('origin')}")
    out.print(f"[bold]why:[/] {proposal.get('rationale', '')}")
    for line in proposal.get("evidence", ()):
        out.print(f"  [dim]evidence[/] {line}")
    for check in patch.get("checks", ()):
        out.print(f"  [dim]check[/] {check}")
    # what the launches change besides files: a person approves these too
    for edit in patch.get("env") or ():
        out.print(f"  [bold]env[/] {EnvEdit.model_validate(edit).describe()}")
    for arg in patch.get("args") or ():
        option = ArgEdit.model_validate(arg)
        out.print(f"  [bold]{option.command}'s command[/] {option.describe()}")
    out.print(Syntax(patch_diff(proposal), "diff", theme="ansi_dark", word_wrap=True))


def edit_in_editor(diff: str) -> str:
    """The diff after $EDITOR (default vi) had it; the temp file is removed whatever happens."""
    editor = shlex.split(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")
    fd, name = tempfile.mkstemp(prefix="medic-", suffix=".diff")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(diff)
        try:
            done = subprocess.run([*editor, name], check=False)
        except OSError as exc:
            raise UsageError(f"cannot start the editor {editor[0]!r} ($EDITOR): {exc.strerror}") from exc
        if done.returncode != 0:
            raise UsageError(f"the editor exited {done.returncode}: nothing was answered, the patch still waits")
        return Path(name).read_text()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


CHOICES = {"a": "approve", "r": "reject", "e": "edit"}
LAUNCH_CHOICES = {"l": "launch", "e": "edit", "s": "reject"}  # stop: the session ends rejected


def ask(launch_question: bool = False) -> dict[str, Any]:
    """No flag: ask at a terminal; without one, refuse rather than guess."""
    choices = LAUNCH_CHOICES if launch_question else CHOICES
    if not sys.stdin.isatty():
        raise UsageError("no terminal to ask at: pass " + ("--launch, --edit or --reject REASON" if launch_question
                                                           else "--yes, --reject REASON or --edit"))
    try:
        words = "launch anyway, edit, or stop?" if launch_question else "approve, reject or edit?"
        choice = typer.prompt(f"{words} [{'/'.join(choices)}]", default="s" if launch_question else "a")
        choice = choice.strip().lower()[:1]
        if choice not in choices:
            raise UsageError(f"answer {', '.join(choices)}, not {choice!r}: the patch still waits")
        answer: dict[str, Any] = {"action": choices[choice]}
        if answer["action"] == "reject":
            answer["reason"] = typer.prompt("why (for the trace)", default="rejected")
    except typer.Abort:  # Ctrl-C or end of input at the prompt: no answer, not a crash
        raise UsageError("no answer was given: the patch still waits") from None
    return answer


def approve(
    session: Annotated[str, typer.Argument(help="the waiting session")],
    patch: Annotated[str | None, typer.Argument(help="the patch id it waits on (a check; optional)")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="approve the patch as proposed")] = False,
    reject: Annotated[str | None, typer.Option(help="reject it, with this reason")] = None,
    edit: Annotated[bool, typer.Option(help="edit the diff in $EDITOR, then apply and verify that")] = False,
    launch: Annotated[bool, typer.Option(help="launch anyway into a fault whose only repair was rejected")] = False,
) -> None:
    """Show the patch a session waits on and answer it; the session then continues until it ends or waits."""
    from agent.session import connect_host, run_session  # the session graph: a second of imports
    if yes + (reject is not None) + edit + launch > 1:
        raise UsageError("--yes, --reject, --edit and --launch are one answer each: pass one")
    config, proposal = waiting_proposal(session, patch)
    if waits_for_launch(proposal):  # --confirm-launch: the next launch waits, not a patch
        if edit:
            raise UsageError(f"session {session} waits to confirm launch {proposal['confirm_launch']}: "
                             "--yes or --reject, there is no diff to edit")
        console.print(f"launch {proposal['confirm_launch']} waits (patches so far: "
                      f"{', '.join(proposal['patches']) or 'none'})")
        go = {"action": "approve"} if yes else ({"action": "reject", "reason": reject} if reject is not None
                                                 else ask())
        if go["action"] == "edit":
            raise UsageError("a launch has no diff to edit: answer a or r")
        go["by"] = _who()
        finish(config, drive(config, lambda view: run_session(config, resume=go, view=view)), postmortem=False)
        return
    if proposal.get("question") and yes:  # not a patch to approve: whether to launch into the fault it was for
        raise UsageError(f"session {session} asks: {LAUNCH_QUESTION}: pass --launch, --edit or --reject REASON")
    show_proposal(proposal)
    if proposal.get("question"):
        console.print(f"{LAUNCH_QUESTION} (rejected: patch {proposal['patch'].get('id')}, above)")
    elif launch:
        raise UsageError(f"session {session} waits for patch {proposal['patch'].get('id')}: --launch answers "
                         "only a launch into a fault whose repair was rejected")
    answer = {"action": "approve"} if yes else {"action": "edit"} if edit else {"action": "launch"} if launch else (
        {"action": "reject", "reason": reject} if reject is not None else ask(bool(proposal.get("question"))))
    host = connect_host(config)
    try:
        outcome = send_answer(config, proposal, answer, host)
    finally:
        host.close()
    finish(config, outcome, postmortem=False)


def send_answer(config: SessionConfig, proposal: CandidateData, answer: dict[str, Any], host: Host) -> str:
    """Check the answer against the files as they are now, then resume the session with it; its outcome."""
    from agent.approval import edited_patch, refuse_if_stale  # the session graph: a second of imports
    from agent.session import make_deps, run_session  # the session graph: a second of imports
    session, pid = config.session_id, proposal["patch"].get("id", "")
    # Checked here, before resuming: a refusal writes nothing and leaves the patch pending.
    if answer["action"] == "approve":
        refuse_if_stale(host, session, proposal)
    if answer["action"] == "edit":
        diff = edit_in_editor(patch_diff(proposal))
        if diff == patch_diff(proposal) and not proposal.get("question"):  # asked again: as it was is an answer
            raise UsageError(f"the diff is unchanged: `medic approve {session} --yes` approves it as proposed")
        try:
            edited = edited_patch(host, proposal, diff)
        except MedicError as err:
            raise SessionError(f"the edited diff was refused ({err}); patch {pid} still waits") from err
        answer["diff"] = edited.diff
        console.print(f"edited diff ok: patch {edited.id} replaces {pid}; applying and verifying it")
    answer["by"] = _who()
    answer.setdefault("reason", "")
    outcome = drive(config, lambda view: run_session(config, resume=answer, deps=make_deps(config, host=host,
                                                                                            view=view)))
    _, again = read_session(session) if outcome == "waiting" else ({}, None)
    if (answer["action"] == "approve" and again is not None and not waits_for_launch(again)
            and again["patch"].get("id") == pid):
        # the file changed between the check above and the graph's own check: the graph refused it too
        raise SessionError(f"patch {pid} was refused: its file changed since it was proposed; it still waits")
    return outcome


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
