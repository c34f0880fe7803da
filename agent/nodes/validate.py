"""validate: the launch exited 0; its output is judged (agent/validation.py) — each shard's on its own in a
sharded session — and the verdict routes the graph: verified, a wrong output (a fault to repair), or the
canary passed (the target is next)."""

from __future__ import annotations

from typing import Any

from agent.deps import Deps
from agent.launch_records import shards_of
from agent.state import SessionState
from agent.validation import validate_output, validate_shards


def validate(state: SessionState, deps: Deps) -> dict[str, Any]:
    return validate_shards(state, deps) if shards_of(state.get("run")) else validate_output(state, deps)
