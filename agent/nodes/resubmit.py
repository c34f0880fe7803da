"""resubmit: Slurm ended the job for a reason that is not the job's (a node failed, it was preempted, the node
did not boot). Submit it again as it was, with no patch: bounded by ``max_resubmits``, with a doubling backoff
so a cluster that is failing nodes gets a moment. Deterministic ends (a time limit, out of memory, a cancel by
someone else, a job that can never start) go to diagnose instead (agent/scheduler.py sorts them)."""

from __future__ import annotations

import time
from typing import Any

from agent.deps import Deps
from agent.state import SessionState


def resubmit(state: SessionState, deps: Deps) -> dict[str, Any]:
    config = deps.config.slurm
    record = state.get("run")
    assert record is not None and record["launcher"] == "slurm", "only a Slurm job ends for the cluster's reasons"
    what = f"{record.get('scheduler_state')}" + (f" ({record['scheduler_reason']})"
                                                 if record.get("scheduler_reason") else "")
    count = int(state.get("resubmits") or 0) + 1
    limit = config.max_resubmits if config else 0
    if count > limit:
        detail = (f"Slurm ended job {record['job_id']} with {what}, and {limit} resubmit(s) already went the "
                  "same way: the cluster, not the job, needs a look")
        deps.record("resubmit", "resubmit", {"launch": record["n"], "state": what, "count": count,
                                             "given_up": True})
        return {"outcome": "budget", "outcome_detail": detail, "resubmits": count}
    delay = (config.resubmit_backoff if config else 0.0) * 2 ** (count - 1)
    deps.record("resubmit", "resubmit", {"launch": record["n"], "job_id": record["job_id"], "state": what,
                                         "count": count, "backoff": delay,
                                         "shards": [int(k) for k, s in (record.get("shard_states") or {}).items()
                                                    if s != "COMPLETED"]})
    time.sleep(delay)
    return {"resubmits": count}
