"""How medic survives faults: ``python -m bench.faults [--long] [-k EXPR]`` from the repository root.

Runs the reliability tests (tests/test_reliability_*.py: SSH outage, SIGKILLs of medic at many points, kills
mid-write, broken patches, planted secrets, injection payloads, changed host key, bad input, a second medic)
with $MEDIC_FAULTS_OUT set, so each test appends its figures there; then prints one table row per fault and,
last, ``faults_survived=<n>/<n> secrets_leaked=<n> policy_escapes=<n> partial_writes=<n>``.

``--long``: a 120 s SSH outage (default 6 s) and twice the mid-write kills. The outage used is printed.
A failing test is a fault not survived: its row says so, and the exit code is pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_reliability_*.py"))
TOTALS = ("secrets_leaked", "policy_escapes", "partial_writes")


def run_tests(out: Path, long: bool, outage: float, select: str | None) -> int:
    env = {**os.environ, "MEDIC_FAULTS_OUT": str(out), "MEDIC_FAULTS_OUTAGE": str(outage)}
    if long:
        env["MEDIC_FAULTS_LONG"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    if select:
        cmd += ["-k", select]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    summary = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else [done.stderr.strip()[-300:]]
    for line in [*tail, *summary]:
        print(f"  pytest: {line}")
    return done.returncode


def rows(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def table(found: list[dict[str, Any]]) -> list[str]:
    width = max([len(r["fault"]) for r in found] + [5])
    lines = [f"{'fault':<{width}}  survived  notes", f"{'-' * width}  --------  -----"]
    for r in found:
        notes = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("fault", "survived", "total") and v != "")
        lines.append(f"{r['fault']:<{width}}  {r['survived']:>3}/{r['total']:<4}  {notes[:160]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="a 120 s SSH outage, more mid-write kills")
    parser.add_argument("-k", dest="select", help="only the tests pytest -k selects")
    args = parser.parse_args(argv)
    outage = 120.0 if args.long else 6.0
    print(f"ssh outage: {outage:.0f}s ({'--long' if args.long else 'short; --long for 120s'})")
    with tempfile.TemporaryDirectory(prefix="medic-faults-") as tmp:
        out = Path(tmp) / "figures.jsonl"
        code = run_tests(out, args.long, outage, args.select)
        found = rows(out)
    for line in table(found):
        print(line)
    survived, total = sum(r["survived"] for r in found), sum(r["total"] for r in found)
    totals = {k: sum(int(r.get(k, 0)) for r in found) for k in TOTALS}
    print(f"faults_survived={survived}/{total} " + " ".join(f"{k}={v}" for k, v in totals.items()))
    return code


if __name__ == "__main__":
    sys.exit(main())
