"""A sharded session, whichever way its shards run (a Slurm job array, or N detached runs on the host): how many
shards there are, and which of them a launch runs. The launchers (agent/launchers/slurm.py,
agent/launchers/shard_runs.py) differ only in how a shard is started and watched; this part is the same for both."""

from __future__ import annotations

from agent.config import SessionConfig
from agent.scheduler import ShardSettings
from agent.state import SessionState


def sharding(config: SessionConfig) -> ShardSettings | None:
    """The session's shard settings (Slurm's, else the detached ones), or None for a job of one shard."""
    found = config.slurm if config.slurm is not None else config.shards
    return found if found is not None and found.shards > 1 else None


def total(config: SessionConfig) -> int:
    found = sharding(config)
    return found.shards if found else 1


def shards_for(state: SessionState, config: SessionConfig, kind: str) -> list[int]:
    """The shards launch ``kind`` runs: none for a plain job or the canary; else the unverified ones (only the
    lowest of them while none is verified and lead_shard is on)."""
    found = sharding(config)
    if kind != "target" or found is None:
        return []
    verified = set(state.get("verified_shards") or [])
    left = [k for k in range(found.shards) if k not in verified]
    return left[:1] if found.lead_shard and not verified else left
