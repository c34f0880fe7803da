"""The postmortem's Slurm and shards part: which job each launch was (a Slurm job, or detached shard runs), each
shard's launches (which finished verified, which were resubmitted), and how much shard-time each fault cost (the
launch's seconds times the shards it ran)."""

from __future__ import annotations

from typing import Any

from agent.readers.tracefile import Trace


def shard_lines(trace: Trace) -> list[str]:
    launches: list[dict[str, Any]] = []  # one per launch event that names a Slurm job
    cost: dict[int, float] = {}  # fault's order in the trace -> shard-seconds of the launch that showed it
    verified: set[int] = set()
    resubmits: list[str] = []
    faults = 0
    current: dict[str, Any] | None = None
    for ev in trace.events:
        d = ev.data
        if ev.kind == "launch" and (d.get("job_id") or d.get("shard_runs")):
            current = {"n": d.get("n"), "job": d.get("job_id") or "detached", "shards": list(d.get("shards") or []),
                       "seconds": 0.0, "outcome": ""}
            launches.append(current)
        elif ev.kind == "run_end" and current is not None:
            current["seconds"], current["outcome"] = float(d.get("seconds") or 0.0), str(d.get("outcome") or "")
        elif ev.kind == "fault":
            faults += 1
            if current is not None and d.get("stage") in ("crash", "canary", "validate"):
                cost[faults] = current["seconds"] * max(1, len(current["shards"]))
                current = None  # the launch's cost is that fault's
        elif ev.kind == "shard" and d.get("verified"):
            verified.add(int(d["shard"]))
        elif ev.kind == "resubmit":
            resubmits.append(f"L{d.get('launch')} after {d.get('state')}")
    if not launches:
        return []
    slurm = any(j["job"] != "detached" for j in launches)
    out = ["", "## Slurm jobs" if slurm else "## Shards (detached runs)", "",
           "| launch | job | shards | outcome | seconds |", "|---|---|---|---|---|"]
    out += [f"| L{j['n']} | {j['job']} | {','.join(map(str, j['shards'])) or '-'} | {j['outcome'] or '-'} | "
            f"{j['seconds']:.0f} |" for j in launches]
    shards = sorted({k for j in launches for k in j["shards"]})
    if shards:
        out += ["", "| shard | launches | verified |", "|---|---|---|"]
        out += [f"| {k} | {sum(1 for j in launches if k in j['shards'])} | {'yes' if k in verified else 'no'} |"
                for k in shards]
    out += [""] + [f"- fault {seq} cost {seconds:.0f} shard-seconds" for seq, seconds in cost.items()]
    out += [f"- resubmitted without a patch: {'; '.join(resubmits)}"] if resubmits else []
    return out
