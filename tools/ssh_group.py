"""A command sent over ssh as the leader of a process group of its own, so that a deadline kills all it started:
how it is wrapped (``grouped``: it first prints its group id) and how that group is killed (``GROUP_KILL``)."""

from __future__ import annotations

import shlex

# The command leads its own process group and first prints the group id, so a deadline can kill all it
# started. ``setsid -w`` forks when its caller already leads a group and waits, so the exit code comes back;
# without setsid, sshd's own per-session group is used.
PRINT_GROUP_THEN_RUN = 'printf "%s\\n" "$$"; exec /bin/sh -c "$1"'
# ``kill -SIG -PGID`` is the one spelling dash and bash agree on. An unreaped zombie counts as alive here,
# which costs at most the 1s wait, and the KILL then is harmless.
GROUP_KILL = ("kill -TERM -{g} 2>/dev/null; i=0; while kill -0 -{g} 2>/dev/null && [ $i -lt 10 ]; "
              "do sleep 0.1; i=$((i+1)); done; kill -KILL -{g} 2>/dev/null; true")


def grouped(line: str) -> str:
    wrapped = f"/bin/sh -c {shlex.quote(PRINT_GROUP_THEN_RUN)} medic {shlex.quote(line)}"
    return f"if command -v setsid >/dev/null 2>&1; then exec setsid -w {wrapped}; else exec {wrapped}; fi"
