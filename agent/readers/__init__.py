"""What reads a session's trace afterwards or from outside: replay, the postmortem, `medic watch`, `--notify`.
They use the graph and the nodes' own updates; the nodes never import them (agent/record/ is what they write)."""
