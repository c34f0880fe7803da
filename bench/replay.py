"""How fast replay re-decides a recorded session: ``python -m bench.replay [N]`` from the repository root.

Replays tests/data/traces/lab_session.jsonl (a real lab session: 10 launches, 8 faults, verified) N times in
this process and compares the mean replay time with the session's own wall clock (last ts - first ts). The
last line printed is ``replay_speedup=<x>`` for scripts to read.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.readers.replay import replay
from agent.readers.tracefile import read_trace

TRACE = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces" / "lab_session.jsonl"
DEFAULT_RUNS = 200


def main(runs: int = DEFAULT_RUNS) -> None:
    session = read_trace(TRACE).duration
    replay(TRACE)  # warm: imports and the first pydantic validation are not what is measured
    start = time.perf_counter()
    results = [replay(TRACE) for _ in range(runs)]
    per_replay = (time.perf_counter() - start) / runs
    diverged = [r.first_divergence for r in results if r.first_divergence]
    print(f"trace: {TRACE.name}, {results[0].events_compared} decisions compared per replay")
    print(f"replays: {runs}, mean replay seconds: {per_replay:.6f}")
    print(f"session real duration seconds: {session:.1f}")
    if diverged:
        print(f"divergence: {diverged[0]}")
    if results[0].stopped:  # a trace that does not end: what came after it was not compared
        print(f"stops: {results[0].stopped}")
    print(f"replay_speedup={session / per_replay:.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_RUNS)
