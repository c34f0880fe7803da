"""A wrong output is set aside before the next target launch, so that the job computes it again.

speculators' clients (0.5 and later) resume: a sample whose ``hs_<i>.safetensors`` exists is not asked again. After
a repair of wrong values, the relaunch would find every row there, write nothing and exit 0 — medic's check then
says the output is older than the launch, and the repair is never judged. So the output medic's check found wrong
(values off, rows short, misshapen or unreadable) is moved, whole, beside itself (``<output>.medic-wrong-L<n>``, n
the launch that wrote it) right before the next target launch, and the launch's event says where it went: nothing
is deleted.
Rows that are only missing (a job that skipped samples: agent/job_words.py) stay where they are: the rows there are
right, and the resuming job writes only the missing ones.
"""

from __future__ import annotations

import shlex
from typing import Any

from agent.repair.types import OutputFacts
from tools.host import Host


def to_set_aside(output: str | None, facts: OutputFacts | None, only_missing: bool, own_check: bool) -> str | None:
    """The output to move aside before the next target launch: one medic's own check found wrong (any problem but
    missing rows), or, judged by the person's validator, one medic's check measured wrong values or rows in."""
    if not output or only_missing:
        return None
    if own_check:
        return output
    wrong = facts is not None and bool(facts.off_layers or facts.short_sequences or facts.misshapen_sequences
                                       or facts.layer_count_sequences)
    return output if wrong else None


def set_aside(host: Host, output: str, launch: int | None) -> dict[str, Any] | None:
    """Move ``output`` to a name of its own beside it; what moved where, or None when it is not there (the job's
    own cleanup, or a person, took it) or could not be moved (the launch goes on: its check will say stale)."""
    if not host.exists(output):
        return None
    base = f"{output.rstrip('/')}.medic-wrong-L{launch or 0}"
    dest, k = base, 1
    while host.exists(dest):
        dest, k = f"{base}.{k}", k + 1
    moved = host.run(f"mv -- {shlex.quote(output)} {shlex.quote(dest)}", timeout=60.0)
    return {"from": output, "to": dest} if moved.ok else None
