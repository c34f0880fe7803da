"""Static API-drift scan: before any launch, check the caller's code against the INSTALLED library. Each
finding is a Fault shaped like the error the run would raise, so the same repair engine fixes it — and a
fault found here costs no model load.

Detectors (each ``(ctx, sources) -> faults`` over the fixable packages' modules the driver reaches; the drift
registry, agent/repair/registry.py, pairs each with the repair its findings feed):
- signatures: calls to names imported from a library — unexpected keywords, missing required arguments (a
  dataclass or pydantic field without a default counts; agent/repair/scan_signatures.py);
- protocol steps, return shapes, CUDA-only calls on a CUDA-less target (agent/repair/scan_rules.py);
- methods grafted onto library objects that call members the object's class lacks (agent/repair/scan_members.py);
- the library's startup checks on the job's environment, for the target's device (agent/repair/scan_env.py).
What it cannot see: state (an assertion deep in the library), values; the canary and the load-time checks
are for those.
"""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor

from agent.repair.context import read_source
from agent.repair.registry import DRIFTS, Drift
from agent.repair.types import Fault, RepairContext
from tools import source as src_tools
from tools.errors import MedicError

MAX_FILES = 40


def scan_files(ctx: RepairContext, driver: str | None) -> list[str]:
    """The fixable packages' modules the driver imports, and their sibling modules (string-named workers)."""
    files: list[str] = []
    src = read_source(ctx, driver) if driver else None
    modules = []
    if src is not None:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ctx.fixable_packages:
                modules.append(node.module)
            elif isinstance(node, ast.Import):
                modules += [a.name for a in node.names if a.name.split(".")[0] in ctx.fixable_packages]
    for module in dict.fromkeys(modules):
        try:
            path = src_tools.module_path(ctx.host, ctx.python, module)
        except MedicError:
            continue
        folder = path.rsplit("/", 1)[0]
        listing = ctx.host.run(["sh", "-c", f"ls -1 '{folder}'/*.py"], timeout=30)
        files += [f for f in listing.stdout.split() if f.endswith(".py")]
    # the driver itself first: it is the user's code, in the workdir, and calls the fixable packages' API
    return list(dict.fromkeys([*([driver] if src is not None and driver else []), *files]))[:MAX_FILES]


def scan(ctx: RepairContext, driver: str | None) -> list[Fault]:
    if "files" not in ctx.memo:
        ctx.memo["files"] = scan_files(ctx, driver)
    sources = [src for path in ctx.memo["files"] if (src := read_source(ctx, path)) is not None]

    def detect(drift: Drift) -> list[Fault]:
        try:
            return drift.detect(ctx, sources)
        except MedicError:
            return []  # a rule that cannot read the library finds nothing; the canary still runs

    # the rules run side by side: each waits on probe processes of the target env (two import torch, seconds
    # each), and none needs another's answer; their findings keep the registry's order
    with ThreadPoolExecutor(max_workers=len(DRIFTS), thread_name_prefix="medic-scan") as pool:
        return [fault for found in pool.map(detect, DRIFTS) for fault in found]


