"""`python -m agent.cli`: the same as the `medic` command."""

from agent.cli.main import main

main()
