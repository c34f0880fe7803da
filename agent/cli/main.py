"""The `medic` command line. Every deliberate error is a MedicError, caught here and printed as one line."""

from __future__ import annotations

import sys

import typer

from agent.cli import approve, run, traces, watch
from lab.cli import app as lab_app
from tools.errors import MedicError

app = typer.Typer(help="medic: takes a long extraction job from library-drift crashes to verified output.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(lab_app, name="lab")
app.command(context_settings={"allow_extra_args": False})(run.run)
app.command()(run.resume)
app.command()(run.revert)
app.command()(approve.sessions)
app.command()(watch.status)
app.command()(watch.watch)
app.command()(approve.approve)
app.command()(approve.policy_check)
app.command()(traces.replay)
app.command()(traces.postmortem)


def main() -> None:
    """Entry point: one place turns MedicError into `medic: <message>` and its exit code."""
    try:
        app()
    except MedicError as err:
        print(f"medic: {err}", file=sys.stderr)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
