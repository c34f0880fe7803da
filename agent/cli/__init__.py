"""The `medic` command line: `main` (the typer app), `run` (run, resume, revert), `approve` (approve,
sessions), `traces` (replay, postmortem)."""
