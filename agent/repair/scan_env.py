"""The environment detector: the library's startup checks on the job's environment, read before any launch.

vLLM checks the process environment where it starts a worker for a device (``libtcmalloc is not found in
LD_PRELOAD``). Those checks are code (agent/repair/env_checks.py reads them); this rule reads the ones in the
library modules for the target's device (a file named for it: ``cpu_worker.py``, ``platforms/cpu.py``) and
holds them against the environment medic will launch the job with. Each unmet one is a finding, so the fault
costs no launch.
"""

from __future__ import annotations

import posixpath
import re

from agent.remedies import host_value
from agent.repair.context import read_source
from agent.repair.edits import Source
from agent.repair.env_checks import env_checks
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
from tools import source as src_tools
from tools.errors import MedicError

DEVICE_PROBE = "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')"
DEVICE_WORDS = {"cpu": ("cpu",), "cuda": ("cuda", "gpu")}
ENV_READ = r"os\.environ\.get\(|os\.getenv\(|os\.environ\["


def target_device(ctx: RepairContext) -> str:
    if "device" not in ctx.memo:
        result = ctx.host.run([ctx.python, "-c", DEVICE_PROBE], timeout=300)
        words = result.stdout.split()
        ctx.memo["device"] = words[-1] if result.ok and words else "cpu"
    return str(ctx.memo["device"])


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
            root = src_tools.module_path(ctx.host, ctx.python, package).rsplit("/", 1)[0]
            hits = [h for word in DEVICE_WORDS.get(device, (device,))
                    for h in src_tools.grep(ctx.host, root, ENV_READ, glob=f"*{word}*.py", max_hits=2000,
                                            python=ctx.python)]
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
    return faults
