"""medic on the server lab from pristine, unattended, no LLM: ``python bench/server.py [--job …] [--keep]``.

A private copy of the server lab (`medic lab build --flavour server`, built when missing) is made pristine, and
one medic session runs on it: the vLLM hidden-state server is started and loaded, the speculators client runs
against it. Printed: server loads, client runs, wall clock, the faults on each side (or found by the scan
before any load), and what the naive strategy would have cost — no scan, and the server and the client
restarted after every fault: one load per fault, and one for the run that verifies.
Last line: ``server_loads=<n> client_runs=<n> naive_server_loads=<n> verified=<0|1>``.

``--job script`` or ``--job launcher`` runs the same job as users wrap it (lab/wrapped_jobs.py: a shell script, or
a Python launcher, that starts the server, waits for /health, runs the client and stops the server), typed with no
``--server``, no ``--validate`` and no ``--output``: each launch of the wrapper is one server load.

Other clients against other servers are slices of the space bench: ``python bench/space.py --only
0.8.1:0.24.0,…`` (bench/space.py: each pair from its own pristine lab, judged by the oracles).
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
from agent.config import Budgets, SessionConfig, Target  # noqa: E402
from agent.job import target_launches  # noqa: E402
from agent.readers.postmortem_server import server_counts  # noqa: E402
from agent.readers.tracefile import read_trace  # noqa: E402
from agent.session import run_session  # noqa: E402
from lab.build import LabPaths, clone_venv  # noqa: E402
from lab.server_lab import SERVER_RUN_ENV, ServerLabPaths  # noqa: E402
from lab.server_pair_lab import server_lab_builder  # noqa: E402
from lab.server_pairs import ServerPair  # noqa: E402
from lab.wrapped_jobs import FILES, write_job  # noqa: E402


def private_copy(dest: Path) -> Path:
    pair = ServerPair()  # the first server lab (`medic lab build --flavour server`)
    builder = server_lab_builder(LabPaths(pair.default_root()), pair=pair)
    builder.build(("tiny",))
    dest.mkdir(parents=True)
    for part in pair.default_root().iterdir():
        if part.name == "venv":
            clone_venv(part, dest / "venv")
        else:
            subprocess.run(["cp", "-al", str(part), str(dest / part.name)], check=True)
    server_lab_builder(LabPaths(dest)).reset()
    return dest


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true", help="keep the private lab and the trace")
    parser.add_argument("--max-launches", type=int, default=6)
    parser.add_argument("--job", choices=("server", *FILES), default="server",
                        help="the --server form, or the same job wrapped in a script or a Python launcher")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="medic-bench-server-"))
    os.environ["MEDIC_HOME"] = str(work / "home")
    try:
        lab = private_copy(work / "lab")
        target = lab_target(lab)
        if args.job != "server":  # as typed: the wrapper alone, no --server, --validate or --output
            paths = ServerLabPaths(lab)
            target = Target(python=str(paths.python), workdir=str(paths.work), command=write_job(paths, args.job),
                            env=dict(SERVER_RUN_ENV))
        config = SessionConfig(session_id="bench-server", target=target, traces_dir=str(work / "traces"),
                               budgets=Budgets(max_launches=args.max_launches))
        started = time.monotonic()
        outcome, values = run_session(config)
        wall = time.monotonic() - started
        # the naive strategy has no scan and no live server: every fault, wherever medic found it, costs one
        # whole load of the server; the run that verifies is one more (the postmortem counts the same)
        got = server_counts(read_trace(work / "traces" / "bench-server.jsonl"))
        if args.job != "server":  # every launch of the wrapper starts its server once
            got["server_loads"] = got["client_runs"] = target_launches(values)
        for fault in values.get("faults") or []:
            print(f"fault [{fault.get('stage')}, {fault.get('side') or 'before any load'}] {fault.get('exc_type')}: "
                  f"{str(fault.get('message'))[:160]}")
        print(f"outcome {outcome}; wall clock {wall:.0f} s; server loads {got['server_loads']}, client runs "
              f"{got['client_runs']}; the naive strategy: {got['naive_server_loads']} server load(s)")
        if args.keep:
            print(f"kept: {work}")
        print(f"job={args.job} server_loads={got['server_loads']} client_runs={got['client_runs']} "
              f"naive_server_loads={got['naive_server_loads']} verified={int(outcome == 'verified')}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
