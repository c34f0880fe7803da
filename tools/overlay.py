"""Try a change to the target env's packages without making it: what pip would install for some requirements
(its own resolver, ``--dry-run --report``, against what the env has), those distributions put into a scratch
folder (``--target``, no dependencies: the plan already names them) that goes first on PYTHONPATH, and one
import in a fresh process. The env itself is never touched, and the folder is removed after.

The import alone does not prove the plan: a library may absorb the failure of its own compiled extension (vLLM
warns and goes on without ``vllm._C``, built against one torch, when another is laid over it; the run dies later
on an op that is not there). So the probe also loads each compiled module at the top of the modules' packages, and
one that loads in the env as it is must load with the plan laid over it."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from tools.errors import MedicError, SourceError
from tools.host import Host

PIP_TIMEOUT = 900.0
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")
# the overlay first, then whatever PYTHONPATH the host gives the target python already
WITH_OVERLAY = 'PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}" exec "$2" -c "$3" "$4"'
# Import the modules in order, then load every compiled module at the top of their packages: what failed, and how
PROBE = r"""
import importlib, importlib.machinery, importlib.util, json, pathlib, sys
modules, failed, loads = json.loads(sys.argv[1]), {}, {}
def last(err):
    return (type(err).__name__ + ": " + str(err)).strip().splitlines()[-1][:300]
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException as err:
        failed[name] = last(err)
for top in dict.fromkeys(m.split(".")[0] for m in modules):
    spec = importlib.util.find_spec(top)
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(pathlib.Path(root).iterdir()):
            suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if path.name.endswith(s)), None)
            if suffix:
                name = top + "." + path.name[: -len(suffix)]
                try:
                    importlib.import_module(name)
                    loads[name] = ""
                except BaseException as err:
                    loads[name] = last(err)
print(json.dumps({"failed": failed, "loads": loads}))
"""


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
    release = SpecifierSet(",".join(str(s).split("+")[0] for s in spec))
    return release.contains(Version(version).public, prereleases=True)
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
            out.append(f"{dist.metadata['Name']} {dist.version} requires {req.name}{req.specifier}")
print(json.dumps(sorted(set(out))))
"""


@dataclass(frozen=True)
class Tried:
    requirements: tuple[str, ...]  # what was asked for, e.g. ("transformers==4.57.6",)
    plan: tuple[str, ...]  # what pip would install for it here, pinned: ("transformers==4.57.6", "tokenizers==…")
    ok: bool  # the modules import with the plan laid over the env
    detail: str  # the import's last line when it failed, or why nothing could be tried


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
    declare is not tried."""
    try:
        plan = install_plan(host, python, requirements, env)
    except MedicError as err:
        return Tried(requirements, (), False, str(err))
    if not plan:
        return Tried(requirements, plan, False, "pip would install nothing: the env has it already")
    broken = breaks(host, python, plan, tuple(m.split(".")[0] for m in modules), env)
    if broken:
        return Tried(requirements, plan, False, f"it would break what the env has: {'; '.join(broken)[:240]}")
    made = host.run(["mktemp", "-d", "-t", "medic-overlay.XXXXXX"], timeout=30)
    folder = made.stdout.strip()
    if not made.ok or not folder:
        return Tried(requirements, plan, False, "no scratch folder on the host")
    try:
        put = host.run([python, *PIP, "install", "--quiet", "--no-deps", "--target", folder, *plan],
                       timeout=PIP_TIMEOUT, env=dict(env or {}))
        if not put.ok:
            last = (put.stderr.strip().splitlines() or ["(no output)"])[-1]
            return Tried(requirements, plan, False, f"pip could not lay {' '.join(plan)} over the env: {last[:200]}")
        laid = probe(host, python, modules, folder, env)
        failed = next(iter(laid.failed.values()), "")
        if not failed:  # else the import's own words say why
            failed = "; ".join(f"{name} loads in the env but not with the plan laid over it: {err}"
                               for name, err in laid.loads.items()
                               if err and probe(host, python, modules, None, env).loads.get(name) == "")
        return Tried(requirements, plan, not failed, failed[:300])
    finally:
        host.run(["rm", "-rf", "--", folder], timeout=120)


@dataclass(frozen=True)
class Probe:
    failed: dict[str, str]  # module -> the last line of why it did not import
    loads: dict[str, str]  # each compiled module of their packages -> "" when it loads, else why not


def probe(host: Host, python: str, modules: tuple[str, ...], overlay: str | None,
          env: Mapping[str, str] | None = None) -> Probe:
    """Import ``modules`` in a fresh process (with ``overlay`` first on PYTHONPATH, when given) and load the
    compiled modules of their packages."""
    argv = (["sh", "-c", WITH_OVERLAY, "overlay", overlay, python, PROBE, json.dumps(list(modules))] if overlay
            else [python, "-c", PROBE, json.dumps(list(modules))])
    result = host.run(argv, timeout=900, env=dict(env or {}))
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return Probe({modules[0]: last[:300]}, {})
    return Probe(dict(answer.get("failed") or {}), dict(answer.get("loads") or {}))


def breaks(host: Host, python: str, plan: tuple[str, ...], tops: tuple[str, ...],
           env: Mapping[str, str] | None = None) -> list[str]:
    """Each range the distributions of the top-level modules ``tops`` declare that ``plan`` would leave."""
    result = host.run([python, "-c", BREAKS, json.dumps(list(plan)), json.dumps(list(tops))], timeout=120,
                      env=dict(env or {}))
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if result.ok and lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, list):
        return ["(the env's declared ranges could not be read)"]
    return [str(a) for a in answer]


def pip_step(python: str, plan: tuple[str, ...]) -> str:
    """The host step that makes the proven plan real: ``<python> -m pip install 'a==1' 'b==2'``."""
    return " ".join([shlex.quote(python), "-m", "pip", "install", *(shlex.quote(p) for p in plan)])
