"""Where a session's launches run: detached processes on the host (the default), or Slurm jobs submitted from it.

Slurm's own ends of a job are faults of their own kind (agent/launchers/slurm.py sorts them): a node that failed,
a preemption or a boot failure says nothing about the job, so it is resubmitted as it was (bounded, with backoff);
a time limit, an out-of-memory kill, a cancel by someone else, or a job that can never leave PENDING would end
the same way again, so it goes to diagnose like any other fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Slurm job states (sacct's names) that medic resubmits without a patch: the job was not at fault.
TRANSIENT_STATES = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
# ...and those that would end the same way again: a fault to diagnose (no patch of the code cures them).
DETERMINISTIC_STATES = frozenset({"TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "DEADLINE", "PENDING", "UNKNOWN",
                                  "REVOKED", "SPECIAL_EXIT"})
# PENDING reasons that never resolve by waiting: the job as submitted cannot start on this cluster.
NEVER_STARTS = frozenset({"PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig", "BadConstraints",
                          "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "DependencyNeverSatisfied",
                          "QOSMaxWallDurationPerJobLimit", "AssocMaxWallDurationPerJobLimit",
                          "QOSMaxCpuPerJobLimit", "QOSMaxNodePerJobLimit"})


class ShardSettings(BaseModel):
    """``medic run --shards N [--no-lead-shard]``: N detached runs on the host (SessionConfig.shards), or, as part of
    SlurmSettings, a job array. Either way the command's {shard} is the shard's index (agent/shards.py)."""

    model_config = ConfigDict(extra="forbid")
    shards: int = Field(default=1, ge=1, le=10000)
    # until one shard is verified, only the lowest unfinished one runs: each fault then costs one shard's
    # launch, not one per shard; once it is verified, every unfinished shard runs at once
    lead_shard: bool = True


class SlurmSettings(ShardSettings):
    """``medic run --scheduler slurm [--partition P] [--sbatch-arg ARG]... [--shards N]``."""

    kind: Literal["slurm"] = "slurm"
    partition: str | None = None
    sbatch_args: list[str] = Field(default_factory=list)  # passed to sbatch as given (--time, --mem, --gres…)
    max_resubmits: int = Field(default=3, ge=0)  # resubmits after a transient end (node failure, preemption)
    resubmit_backoff: float = Field(default=10.0, ge=0)  # seconds before the first; doubled for each next one


def transient(record: Mapping[str, Any]) -> bool:
    """Did Slurm end this launch for a reason that is not the job's (the graph resubmits it, no patch)?"""
    outcome = str(record.get("outcome") or "")
    return outcome.startswith("scheduler:") and outcome.removeprefix("scheduler:") in TRANSIENT_STATES
