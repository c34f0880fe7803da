"""The environment detector: the library's startup checks on the job's environment, read before any launch.

vLLM checks the process environment where it starts a worker for a device (``libtcmalloc is not found in
LD_PRELOAD``). Those checks are code (agent/repair/env_checks.py reads them); this rule reads the ones in the
library modules for the target's device (a file named for it: ``cpu_worker.py``, ``platforms/cpu.py``) and
holds them against the environment medic will launch the job with. Each unmet one is a finding, so the fault
costs no launch.
"""

from __future__ import annotations

import ast
import posixpath
import re

from agent.remedies import host_value
from agent.repair.context import library_grep, module_file, read_source
from agent.repair.derived_env import QUOTED, choices_asked
from agent.repair.edits import Source
from agent.repair.env_checks import env_checks, message_template
from agent.repair.scan_platform import server_entries
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
from tools.errors import MedicError

DEVICE_PROBE = "import torch; print(torch.version.cuda or '-', 'cuda' if torch.cuda.is_available() else 'cpu')"
DEVICE_WORDS = {"cpu": ("cpu",), "cuda": ("cuda", "gpu")}
ENV_READ = r"os\.environ\.get\(|os\.getenv\(|os\.environ\["


def torch_probe(ctx: RepairContext) -> tuple[bool, str]:
    """(the target env's torch is built with CUDA, the device it sees), asked once."""
    if "device" not in ctx.memo:
        result = ctx.host.run([ctx.python, "-c", DEVICE_PROBE], timeout=300)
        words = result.stdout.split()
        ok = result.ok and len(words) >= 2
        ctx.memo["device"] = (ok and words[-2] != "-", words[-1] if ok else "cpu")
    built, seen = ctx.memo["device"]
    return bool(built), str(seen)


def target_device(ctx: RepairContext) -> str:
    """The job's device: what its target says, else what the target env's torch sees."""
    return ctx.device or torch_probe(ctx)[1]


def cuda_target(ctx: RepairContext) -> bool:
    """A job on CUDA: its device is cuda and the target env's torch is built with CUDA."""
    return target_device(ctx) == "cuda" and torch_probe(ctx)[0]


def for_device(path: str, device: str) -> bool:
    words = [*re.split(r"[_.]", posixpath.basename(path)), posixpath.basename(posixpath.dirname(path))]
    return any(w in words for w in DEVICE_WORDS.get(device, (device,))) and (
        posixpath.basename(path) != "__init__.py")


def environment_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    device = target_device(ctx)
    job_env = dict(ctx.job_env or {})  # a variable the job does not set is the host's own: read once below
    faults: list[Fault] = []
    for package in ctx.library_packages:
        try:
            hits = [h for word in DEVICE_WORDS.get(device, (device,))
                    for h in library_grep(ctx, package, ENV_READ, glob=f"*{word}*.py", max_hits=2000)]
        except MedicError:
            continue
        for path in dict.fromkeys(h.path for h in hits if for_device(h.path, device)):
            src = read_source(ctx, path)
            for check in env_checks(src) if src else []:
                if check.var not in job_env:  # not set by medic: the job inherits the host's own value
                    job_env[check.var] = host_value(ctx.host, check.var)
                if check.required in job_env[check.var]:
                    continue
                func = src.enclosing_function(check.line) if src else None
                faults.append(Fault(
                    "scan", "RuntimeError", f"{check.required} is not in {check.var} (the {device} check at "
                    f"{path}:{check.line} raises at startup)",
                    (FrameRef(path, check.line, func.name if func else "<module>", src.line(check.line).strip()
                              if src else ""),),
                    fingerprint=f"scan:env:{check.var}:{check.required}",
                    log_excerpt=f"predicted by the scan: {check.var}={job_env.get(check.var, '')!r} for the job",
                    finding=Finding("environment", callee=check.var, name=check.required,
                                    detail=f"{path}:{check.line}")))
    return faults + (start_method_drift(ctx, job_env) if cuda_target(ctx) else [])


def forked_checks(src: Source) -> list[tuple[ast.Raise, str]]:
    """torch's raises in a process forked after CUDA was initialized (``if _is_in_bad_fork(): raise …``) whose
    message asks for a start method in quotes: (the raise, its message)."""
    found = []
    for node in ast.walk(src.tree):
        if isinstance(node, ast.If) and "fork" in ast.unparse(node.test).lower():
            for raised in (n for n in node.body if isinstance(n, ast.Raise)):
                message = message_template(raised)
                if QUOTED.search(message):
                    found.append((raised, message))
    return found


def start_method_drift(ctx: RepairContext, job_env: dict[str, str]) -> list[Fault]:
    """On a CUDA target, torch raises in a forked worker and asks for another start method (its own check, read
    here); the library reads its workers' start method from a variable whose choices include that one. Unless
    the job's environment already chooses it, the first worker would raise: a finding, before any launch."""
    try:
        path = module_file(ctx, "torch.cuda")
    except MedicError:
        return []
    src = read_source(ctx, path)
    faults: list[Fault] = []
    for raised, message in forked_checks(src) if src else []:
        for choice, wanted in choices_asked(ctx, message):
            if choice.var not in job_env:
                job_env[choice.var] = host_value(ctx.host, choice.var)
            if job_env[choice.var] == wanted or (not job_env[choice.var] and entry_sets(ctx, choice.var, wanted)):
                continue
            func = src.enclosing_function(raised.lineno) if src else None
            faults.append(Fault(
                "scan", "RuntimeError", message,
                (FrameRef(path, raised.lineno, func.name if func else "<module>", src.line(raised.lineno).strip()
                          if src else ""),),
                fingerprint=f"scan:env:{choice.var}:{wanted}",
                log_excerpt=(f"predicted by the scan: a CUDA job whose {choice.var} is "
                             f"{job_env[choice.var] or choice.default!r} forks its workers"),
                finding=Finding("env_choice", callee=choice.var, name=wanted, detail=f"{choice.path}:{choice.line}")))
    return faults


def entry_sets(ctx: RepairContext, var: str, wanted: str) -> bool:
    """The job's server starts at a library entry that itself sets ``var`` to ``wanted`` where the environment
    leaves it unset (vLLM's CLI: ``os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"`` in the setup its
    ``main`` calls): its workers are not forked, so there is nothing to predict. Read in the entry module and in
    the library functions it calls by a name it imports (one call deep)."""
    for path in server_entries(ctx) if ctx.server_command else []:
        src = read_source(ctx, path)
        if src is None:
            continue
        if sets_env(src.tree, var, wanted):
            return True
        for module, names in called_imports(src.tree).items():
            try:  # one probe per module, however many of its names the entry calls
                callee = read_source(ctx, module_file(ctx, module))
            except MedicError:
                continue
            if callee is not None and any(isinstance(d, ast.FunctionDef) and d.name in names
                                          and sets_env(d, var, wanted) for d in ast.walk(callee.tree)):
                return True
    return False


def sets_env(tree: ast.AST, var: str, wanted: str) -> bool:
    """``os.environ["VAR"] = "wanted"`` somewhere in ``tree``."""
    return any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value == wanted
               and any(isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ"
                       and isinstance(t.slice, ast.Constant) and t.slice.value == var for t in n.targets)
               for n in ast.walk(tree))


def called_imports(tree: ast.AST) -> dict[str, set[str]]:
    """module -> the names the code calls that it imports from there with ``from M import f`` (at any depth)."""
    imported = {alias.asname or alias.name: (n.module, alias.name) for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 for alias in n.names}
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    out: dict[str, set[str]] = {}
    for module, name in (imported[name] for name in sorted(called) if name in imported):
        out.setdefault(module, set()).add(name)
    return out
