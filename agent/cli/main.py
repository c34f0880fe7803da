"""The `medic` command line. Every deliberate error is a MedicError, caught here and printed as one line."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import typer

from agent.cli import approve, policy_check, run, stop, traces, watch
from agent.outcomes import exit_code
from lab.cli import app as lab_app
from tools.errors import MedicError

app = typer.Typer(help="medic: takes a long extraction job from library-drift crashes to verified output.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(lab_app, name="lab")
app.command(context_settings={"allow_extra_args": False})(run.run)
app.command()(run.resume)
app.command()(run.revert)
app.command()(stop.stop)
app.command()(approve.sessions)
app.command()(watch.status)
app.command()(watch.watch)
app.command()(approve.approve)
app.command()(policy_check.policy_check)
app.command()(traces.replay)
app.command()(traces.postmortem)


def main() -> None:
    """Entry point: one place turns MedicError into `medic: <message>` and its exit code, and anything else
    (a bug outside a session, which run_session records itself) into one line and exit internal_error —
    never Python's exit 1 with a traceback. MEDIC_TRACEBACK=1 prints the traceback too."""
    try:
        app()
    except MedicError as err:
        print(f"medic: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except Exception as err:
        if os.environ.get("MEDIC_TRACEBACK"):
            traceback.print_exc()
        where = traceback.extract_tb(err.__traceback__)[-1]
        said = " ".join(str(err).split())[:300]
        print(f"medic: internal error: {type(err).__name__}{': ' + said if said else ''} "
              f"(at {Path(where.filename).name}:{where.lineno}; MEDIC_TRACEBACK=1 shows the traceback)",
              file=sys.stderr)
        sys.exit(exit_code("internal_error"))


if __name__ == "__main__":
    main()
