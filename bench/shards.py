"""The lab cascade as a sharded Slurm job (or as detached shard runs): shard launches per shard and in total,
against the naive way.

    python bench/shards.py [--shards 4] [--scan] [--lab DIR] [--scheduler slurm|detached]

A hard-linked copy of the lab (pristine speculators), a one-node Slurm cluster on 127.0.0.1 (lab/slurm_up.sh; started
and stopped here when none is up), and `medic run --scheduler slurm --shards N` on it: each shard writes its own
output (``hidden_states.{shard}.pt``; the lab's driver has no dataset split, so each shard extracts the whole tiny
prompt set) and is validated on its own. Without --scan every fault costs a launch, as in the README's cascade.

naive: each shard finds each fault on its own — N times the launches the lead shard needed to reach a verified
output. medic: the lead shard finds the faults (one repair each), then the other shards run once.
Last line: ``shards=4 total_launches=<n> naive_launches=<n> verified_shards=<n>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab.build import DEFAULT_ROOT, RUN_ENV, LabPaths  # noqa: E402

MEDIC = [sys.executable, "-c", "from agent.cli.main import main; main()"]


def cluster_up() -> bool:
    answer = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return answer.returncode == 0 and answer.stdout.strip() in ("idle", "mixed", "allocated")


def no_cluster() -> str | None:
    """Why no Slurm cluster can be used here (one line), or None: Slurm's commands must be installed; a cluster
    that is installed but down is started by lab/slurm_up.sh."""
    missing = [tool for tool in ("sinfo", "sbatch") if shutil.which(tool) is None]
    if missing:
        return (f"no Slurm on this machine ({' and '.join(missing)} not on PATH): start one with `make slurm-up`, "
                "or pass --scheduler detached")
    return None


def sharded(words: list[str], output: str) -> list[str]:
    """The lab's command line with its output file made one per shard."""
    return [word.replace(output, output.removesuffix(".pt") + ".{shard}.pt") for word in words]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--scan", action="store_true", help="the static scan first (then only fault #6 needs a run)")
    parser.add_argument("--lab", default=str(DEFAULT_ROOT))
    parser.add_argument("--scheduler", choices=["slurm", "detached"], default="slurm",
                        help="detached: N runs on this machine, no cluster")
    args = parser.parse_args()
    why = (f"no lab at {args.lab}: run `medic lab build`" if not LabPaths(Path(args.lab)).python.exists()
           else no_cluster() if args.scheduler == "slurm" else None)
    started_cluster = not why and args.scheduler == "slurm" and not cluster_up()
    if started_cluster:
        up = subprocess.run([str(REPO / "lab" / "slurm_up.sh")], capture_output=True, text=True)
        if up.returncode != 0:
            said = (up.stderr.strip().splitlines() or [f"exit {up.returncode}"])[-1]
            why = f"no Slurm cluster is up and lab/slurm_up.sh could not start one: {said}"
    if why:
        print(f"bench/shards.py: {why}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="medic-bench-shards-"))
    subprocess.run(["cp", "-al", args.lab, str(work / "lab")], check=True)
    lab = LabPaths(work / "lab")
    env = {**os.environ, "MEDIC_HOME": str(work / "home")}
    try:
        subprocess.run([*MEDIC, "lab", "reset", "--path", str(lab.root)], env=env, check=True, capture_output=True)
        out = str(lab.output)
        command = sharded(lab.command(), out)
        validate = " ".join(sharded(lab.validate_command(), out))
        flags = [] if args.scan else ["--no-scan"]
        start = time.monotonic()
        proc = subprocess.run([*MEDIC, "run", "--session", "bench-shards", "--python", str(lab.python),
                               "--workdir", str(lab.work), "--validate", validate, "--traces", str(work / "traces"),
                               "--scheduler", args.scheduler, "--shards", str(args.shards), "--max-launches", "20",
                               *[f"--env={k}={v}" for k, v in RUN_ENV.items()], *flags, "--", *command],
                              env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
    finally:
        if started_cluster:
            subprocess.run([str(REPO / "lab" / "slurm_down.sh")], check=False)
    trace = work / "traces" / "bench-shards.jsonl"
    events = [json.loads(line) for line in trace.read_text().splitlines()[1:]] if trace.exists() else []
    launches = [e["data"] for e in events if e["kind"] == "launch" and e["data"].get("kind") == "target"]
    verified = sorted({e["data"]["shard"] for e in events if e["kind"] == "shard" and e["data"].get("verified")})
    per_shard = {k: sum(1 for launch in launches if k in (launch.get("shards") or [])) for k in range(args.shards)}
    lead = per_shard.get(0, 0)
    total = sum(per_shard.values())
    naive = args.shards * lead
    faults = sum(1 for e in events if e["kind"] == "fault")
    print(f"medic exit {proc.returncode} after {wall:.0f} s; {len(launches)} job(s); {faults} fault(s), "
          f"{sum(1 for e in events if e['kind'] == 'applied')} patch(es); traces in {work / 'traces'}")
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    print(f"{'shard':>5} {'launches':>8} {'verified':>8}")
    for k, count in per_shard.items():
        print(f"{k:>5} {count:>8} {'yes' if k in verified else 'no':>8}")
    print(f"shards={args.shards} total_launches={total} naive_launches={naive} verified_shards={len(verified)}")
    return 0 if proc.returncode == 0 and len(verified) == args.shards else 1


if __name__ == "__main__":
    sys.exit(main())
