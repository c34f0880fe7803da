"""Launches and wall clock to take the lab from pristine to verified output, per strategy.

    python bench/cascade.py [--lab DIR] [--size large] [--only medic-full[,naive,…]]

naive: fix only after each crash (no scan, no canary: every fault costs a target-model launch).
medic-no-scan: canary + target, no static scan.   medic-full: scan, canary, target (started beside the canary).
medic-serial: as medic-full, the target started only once the canary passed (--no-overlap).
Then one clean launch of the fixed lab gives the unit for the ratio. Last line is medic full's figures.
Needs the lab built with that size (`medic lab build --size large`); takes several minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEDIC = [sys.executable, "-c", "from agent.cli.main import main; main()"]
STRATEGIES = {
    "naive": ["--no-scan", "--no-canary"],
    "medic-no-scan": ["--no-scan"],
    "medic-serial": ["--no-overlap"],
    "medic-full": [],
}


def session(lab: str, size: str, flags: list[str], home: Path, name: str) -> dict[str, float]:
    env = {**os.environ, "MEDIC_HOME": str(home)}
    subprocess.run([*MEDIC, "lab", "reset", "--path", lab], env=env, check=True, capture_output=True)
    return measure(lab, size, flags, home, name, env)


def measure(lab: str, size: str, flags: list[str], home: Path, name: str, env: dict[str, str]) -> dict[str, float]:
    start = time.monotonic()
    proc = subprocess.run([*MEDIC, "run", "--session", name, "--lab", lab, "--lab-size", size,
                           "--traces", str(home / "traces"), *flags], env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    events = [json.loads(line) for line in (home / "traces" / f"{name}.jsonl").read_text().splitlines()[1:]]
    kinds = [e["data"].get("kind") for e in events if e["kind"] == "launch"]
    return {"exit": proc.returncode, "wall": wall, "target": kinds.count("target"), "canary": kinds.count("canary")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lab", default=str(Path.home() / ".cache" / "medic" / "lab"))
    parser.add_argument("--size", default="large")
    parser.add_argument("--only", default=",".join(STRATEGIES), help="the strategies to run, comma-separated "
                        "(medic-full is always run: the last line is its figures)")
    args = parser.parse_args()
    wanted = {*args.only.split(","), "medic-full"}
    unknown = wanted - set(STRATEGIES)
    if unknown:
        parser.error(f"not a strategy: {', '.join(sorted(unknown))} (known: {', '.join(STRATEGIES)})")
    home = Path(tempfile.mkdtemp(prefix="medic-bench-"))
    results = {name: session(args.lab, args.size, flags, home, f"bench-{name}")
               for name, flags in STRATEGIES.items() if name in wanted}
    env = {**os.environ, "MEDIC_HOME": str(home)}
    clean = measure(args.lab, args.size, ["--no-scan", "--no-canary"], home, "bench-clean", env)
    print(f"one clean launch of the {args.size} model: {clean['wall']:.1f} s (exit {clean['exit']})")
    print(f"{'strategy':<15} {'exit':>4} {'target':>6} {'canary':>6} {'wall s':>8} {'ratio':>6}")
    for name, r in results.items():
        print(f"{name:<15} {r['exit']:>4} {r['target']:>6} {r['canary']:>6} {r['wall']:>8.1f} "
              f"{r['wall'] / clean['wall']:>6.2f}")
    full = results["medic-full"]
    print(f"target_launches={full['target']} canary_launches={full['canary']} "
          f"wall_ratio={full['wall'] / clean['wall']:.2f}")
    return 0 if all(r["exit"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
