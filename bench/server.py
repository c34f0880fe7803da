"""medic on the server lab from pristine, unattended, no LLM: ``python bench/server.py [--keep]``.

A private copy of the server lab (`medic lab build --flavour server`, built when missing) is made pristine, and
one medic session runs on it: the vLLM hidden-state server is started and loaded, the speculators client runs
against it. Printed: server loads, client runs, wall clock, the faults on each side (or found by the scan
before any load), and what the naive strategy would have cost — no scan, and the server and the client
restarted after every fault: one load per fault, and one for the run that verifies.
Last line: ``server_loads=<n> client_runs=<n> naive_server_loads=<n> verified=<0|1>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.cli.run import lab_target  # noqa: E402
from agent.config import Budgets, SessionConfig  # noqa: E402
from agent.record.postmortem_server import server_counts  # noqa: E402
from agent.record.tracefile import read_trace  # noqa: E402
from agent.session import run_session  # noqa: E402
from lab.build import LabPaths, clone_venv  # noqa: E402
from lab.server_lab import ServerLabBuilder, server_root  # noqa: E402


def private_copy(dest: Path) -> Path:
    builder = ServerLabBuilder(LabPaths(server_root()))
    builder.build(("tiny",))
    dest.mkdir(parents=True)
    for part in server_root().iterdir():
        if part.name == "venv":
            clone_venv(part, dest / "venv")
        else:
            subprocess.run(["cp", "-al", str(part), str(dest / part.name)], check=True)
    ServerLabBuilder(LabPaths(dest)).reset()
    return dest


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true", help="keep the private lab and the trace")
    parser.add_argument("--max-launches", type=int, default=6)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="medic-bench-server-"))
    os.environ["MEDIC_HOME"] = str(work / "home")
    try:
        lab = private_copy(work / "lab")
        config = SessionConfig(session_id="bench-server", target=lab_target(lab), traces_dir=str(work / "traces"),
                               budgets=Budgets(max_launches=args.max_launches))
        started = time.monotonic()
        outcome, values = run_session(config)
        wall = time.monotonic() - started
        # the naive strategy has no scan and no live server: every fault, wherever medic found it, costs one
        # whole load of the server; the run that verifies is one more (the postmortem counts the same)
        got = server_counts(read_trace(work / "traces" / "bench-server.jsonl"))
        for fault in values.get("faults") or []:
            print(f"fault [{fault.get('stage')}, {fault.get('side') or 'before any load'}] {fault.get('exc_type')}: "
                  f"{str(fault.get('message'))[:160]}")
        print(f"outcome {outcome}; wall clock {wall:.0f} s; server loads {got['server_loads']}, client runs "
              f"{got['client_runs']}; the naive strategy: {got['naive_server_loads']} server load(s)")
        if args.keep:
            print(f"kept: {work}")
        print(f"server_loads={got['server_loads']} client_runs={got['client_runs']} "
              f"naive_server_loads={got['naive_server_loads']} verified={int(outcome == 'verified')}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
