"""Static API-drift scan: before any launch, check the caller's code against the INSTALLED library. Each
finding is a Fault shaped like the error the run would raise, so the same repair engine fixes it — and a
fault found here costs no model load.

Rules (each ``(ctx, sources) -> faults`` over the fixable packages' modules the driver reaches):
- signatures: calls to names imported from a library — unexpected keywords, missing required arguments (a
  dataclass or pydantic field without a default counts);
- protocol steps, return shapes, CUDA-only calls on a CUDA-less target (agent/repair/scan_rules.py);
- methods grafted onto library objects that call members the object's class lacks (agent/repair/scan_members.py);
- the library's startup checks on the job's environment, for the target's device (agent/repair/scan_env.py).
What it cannot see: state (an assertion deep in the library), values; the canary and the load-time checks
are for those.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from agent.repair.context import read_source
from agent.repair.edits import Source, callee_name
from agent.repair.scan_env import environment_drift
from agent.repair.scan_members import grafted_member_drift
from agent.repair.scan_rules import device_drift, protocol_drift, shape_drift
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
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
    faults: list[Fault] = []
    for rule in RULES:
        try:
            faults += rule(ctx, sources)
        except MedicError:
            continue  # a rule that cannot read the library finds nothing; the canary still runs
    return faults


def signature_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    faults: list[Fault] = []
    for src in sources:
        for call in (n for n in ast.walk(src.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
            name = callee_name(call)
            module = src.imported_from(name or "")
            if not name or not module or module.split(".")[0] not in ctx.api_packages(src.path):
                continue
            key = f"signature:{module}:{name}"
            if key not in ctx.memo:
                try:
                    ctx.memo[key] = src_tools.signature(ctx.host, ctx.python, f"{module}:{name}")
                except MedicError:
                    ctx.memo[key] = None
            if ctx.memo[key] is not None:
                faults += drift_at(src, call, name, ctx.memo[key])
    return faults


def drift_at(src: Source, call: ast.Call, name: str, sig: src_tools.Signature) -> list[Fault]:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return []  # *args / **kwargs at the call: cannot tell statically
    func = src.enclosing_function(call.lineno)
    frame = FrameRef(src.path, call.lineno, func.name if func else "<module>", src.line(call.lineno).strip())
    params = [p for p in sig.params if p.name not in ("self", "cls")]
    names = {p.name for p in params}
    takes_any = any(p.kind == "var_keyword" for p in params)
    found: list[Fault] = []
    for kw in call.keywords:
        if kw.arg and kw.arg not in names and not takes_any:
            found.append(Fault("scan", "TypeError", f"{name}() got an unexpected keyword argument '{kw.arg}'",
                               (frame,), fingerprint=f"scan:{name}:{kw.arg}",
                               finding=Finding("unexpected_kwarg", callee=name, name=kw.arg)))
    positional = [p for p in params if p.kind in ("positional_only", "positional_or_keyword")]
    if any(p.kind == "var_positional" for p in params):
        return found
    given = {p.name for p in positional[: len(call.args)]} | {k.arg for k in call.keywords if k.arg}
    missing = [p.name for p in params if not p.has_default and p.kind not in ("var_positional", "var_keyword")
               and p.name not in given]
    for param in missing:
        found.append(Fault("scan", "TypeError", f"{name}() missing 1 required positional argument: '{param}'",
                           (frame,), fingerprint=f"scan:{name}:{param}",
                           finding=Finding("missing_argument", callee=name, name=param)))
    return found


RULES: tuple[Callable[[RepairContext, list[Source]], list[Fault]], ...] = (
    environment_drift, signature_drift, protocol_drift, shape_drift, device_drift, grafted_member_drift,
)
