"""The space bench's oracles, none of them medic's own word: the lab's checker on what medic verified; a kept
change in a session that did not verify (or a caller's drift "fixed" inside vLLM) is wrong; a stop is honest
only when its report names the first fatal line, the side it belongs to, and why no change medic may make
reaches it. A change kept by a session that stopped is counted apart, as unproven."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from agent.outcomes import NO_REASON
from agent.readers.postmortem_server import server_counts
from agent.readers.postmortem_summary import FaultView, PatchView, summarize
from agent.readers.replay import replay
from agent.readers.tracefile import read_trace
from bench.space_pair import Pair
from lab.build import LabPaths
from lab.server_lab import ServerLabPaths, server_environ

SIDES = (("/site-packages/vllm/", "vLLM"), ("/site-packages/speculators/", "speculators"),
         ("/site-packages/hs_connectors/", "speculators"), ("/site-packages/torch/", "torch"),
         ("/site-packages/transformers/", "transformers"))
STDLIB = "/lib/python3"


def side_of(fault: FaultView) -> str:
    """Whose code the fault's innermost frame is in (a two-process job also says which process). A frame of
    another installed package is passed over: a helper such as pydantic raises for its caller (vLLM's config)."""
    where = "the user's code" if fault.frames else "the environment"
    for frame in reversed(fault.frames):
        found = next((name for marker, name in SIDES if marker in frame), None)
        if found:
            where = found
            break
        if STDLIB in frame and "/site-packages/" not in frame:
            where = "the standard library"
            break
    return f"{fault.side}: {where}" if fault.side else where


def is_env_change(patch: PatchView) -> bool:
    return patch.id.startswith("env-") or patch.origin.startswith(("env", "derived:env", "derived:host"))


def library_answer(patch: PatchView) -> bool:
    """A repair of vLLM against its host (its own stand-ins, its own helpers: README), not a caller's drift."""
    return patch.origin.startswith("derived:platform")


def judge(pair: Pair, copy: Path, trace_path: Path, row: dict[str, Any]) -> dict[str, Any]:
    trace = read_trace(trace_path)
    s = summarize(trace)
    medic_verified = s.outcome == "verified" == row.get("medic_outcome")
    checker_ok: bool | None = None
    checker_said = ""
    if medic_verified:
        checked = lab_checker(pair.flavour, copy)
        checker_ok = checked.returncode == 0
        checker_said = (checked.stdout.strip().splitlines() or checked.stderr.strip().splitlines() or [""])[-1]
    verified = medic_verified and bool(checker_ok)
    kept = s.kept
    needless = list((row.get("necessity") or {}).get("needless") or []) if verified else []
    in_vllm = [p for p in kept if any("/site-packages/vllm/" in f"/{f}" for f in p.files)]
    # wrong (issue 33): a kept change that is needless (the necessity oracle) or changes behaviour — a caller's
    # drift "fixed" inside vLLM. A change kept by a session that stopped is unproven, not wrong: no output says
    # whether it was needed (a supported model on the same pair would meet it).
    wrong = {p.id for p in in_vllm if not library_answer(p)}
    unproven = sorted(p.id for p in kept) if not verified else []
    last = s.faults[-1] if s.faults else None
    first_line = last.summary.strip().splitlines()[0][:200] if last and last.summary.strip() else ""
    # "nothing found a patch" names no reason: a stop must say why (a limit, a refusal, what an oracle proved)
    honest = (not verified and not wrong and bool(first_line) and bool(s.detail.strip())
              and NO_REASON not in s.detail and s.outcome not in ("internal_error", "unfinished"))
    if pair.flavour == "server":
        counts = server_counts(trace)
        loads, naive = counts["server_loads"], counts["naive_server_loads"]
    else:
        loads = len(s.targets)
        naive = len(s.faults) + int(verified)
    return {
        "outcome": "verified" if verified else ("FALSE SUCCESS" if medic_verified else s.outcome),
        # whole: the honesty oracle reads why a stop stopped (the table prints its head)
        "detail": " ".join(s.detail.split())[:4000],
        "verified": verified, "false_success": medic_verified and not checker_ok, "checker": checker_said[:200],
        "honest_stop": honest, "wrong": sorted(wrong | set(needless)), "needless": needless, "unproven": unproven,
        "needed": (row.get("necessity") or {}).get("needed"), "necessity_unknown": (row.get("necessity") or {}).get(
            "unknown"),
        "target_launches": loads, "canary_launches": len(s.canaries), "naive_launches": naive,
        "faults": [{"stage": f.stage, "when": f.when, "side": side_of(f),
                    "line": f.summary.strip().splitlines()[0][:200] if f.summary.strip() else ""} for f in s.faults],
        "kept": [{"id": p.id, "origin": p.origin, "env": is_env_change(p), "files": p.files} for p in kept],
        "replay": replays(trace_path),
    }


def replays(trace_path: Path) -> dict[str, str]:
    """Each session recorded for the pair — its own, and the necessity oracle's — replayed with no host and no
    model: its name and ``exact``, or where the replay left the recorded decisions."""
    out: dict[str, str] = {}
    for path in [trace_path, *sorted(trace_path.parent.glob(f"{trace_path.stem}-without-*.jsonl"))]:
        try:
            result = replay(path)
        except Exception as err:  # a trace replay cannot read is the oracle's finding, not the bench's end
            out[path.stem] = f"replay failed: {type(err).__name__}: {err}"[:300]
            continue
        # the necessity oracle's sessions run in approve mode: one that ends waiting for a person replayed whole
        out[path.stem] = ("exact" if result.exact else "exact (waits for a person)" if result.exact_to_its_pause
                          else (result.first_divergence or result.stopped or "?")[:300])
    return out


def lab_checker(flavour: str, copy: Path) -> subprocess.CompletedProcess[str]:
    """The lab's own checker (lab/target/check.py or check_server.py) with the pair's python, on the output."""
    if flavour == "server":
        return subprocess.run(ServerLabPaths(copy).validate_command(), env=server_environ(), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
    return subprocess.run(LabPaths(copy).validate_command(), env={**os.environ, "OMP_NUM_THREADS": "2"},
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
