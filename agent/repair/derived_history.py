"""Package faults of the target env with no declared range violated: the fixable package does not import as its
wheel shipped it (tools/envprobe.pristine_import), yet every distribution it declares is inside its range (else
agent/repair/derived_packages.py answers). pip resolved the package's open ranges to releases newer than the
package itself: the package's own history is the evidence of what it was made against.

- the distributions suspected are those the package requires whose modules the failing import runs through
  (a frame in them), then those it only names;
- for each, in turn: the newest release inside what the package's NEXT release pins for it (its maintainers' own
  word that the installed one does not do), then the newest release published before the package's own release
  (PyPI's upload times: tools/history.py);
- each is proven before it is proposed: what pip would install for it here is laid over the env in a scratch
  folder and the failing module imported, then the library (tools/overlay.py): a plan that would leave a range
  the package or the library declares is not tried; the first that imports becomes a host step,
  ``<python> -m pip install '<name>==<version>' …`` (exactly the plan that was proven), which only a person or a
  policy rule takes.

When nothing is proven the repair raises ``ImportMismatch``, whose line is the session's stop message:
"environment mismatch: <package> does not import as shipped", the package's frame that raised, what was tried.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as Spec
from packaging.version import InvalidVersion, Version

from agent.repair.context import one_line
from agent.repair.derived_packages import ImportMismatch, fails_as_shipped, proof_lines, stop_line
from agent.repair.types import Candidate, Check, Fault, RepairContext
from tools.diffs import env_patch
from tools.envprobe import PristineImport
from tools.errors import SourceError
from tools.history import requires_of, upload_times
from tools.overlay import Tried, pip_step, try_overlay
from tools.requirements import Declared, Requirement, normalize

MAX_TRIES = 5  # each is a pip plan, a download and an import in the target env


def environment_history(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    failing = fails_as_shipped(ctx, fault)  # else: a patch's doing, not an import fault, or it cannot be told
    if failing is None:
        return []
    module, pristine, declared = failing.module, failing.pristine, failing.declared
    package = module.split(".")[0]
    if declared.conflicts:
        return []  # a declared range is violated: derived_packages' host step, or nothing
    tried: list[Tried] = []
    try:
        options = history_options(declared, suspects(declared, fault, pristine))
    except SourceError as err:
        options, tried = [], [Tried((), (), False, str(err))]
    for requirements, reason in options[:MAX_TRIES]:
        attempt = try_overlay(ctx.host, ctx.python, (module, *ctx.library_packages), requirements, ctx.job_env)
        tried.append(attempt)
        if attempt.ok:
            return [proven(ctx, module, declared, pristine, " ".join(requirements), reason, attempt)]
    raise ImportMismatch(stop_line(ctx, package, pristine, tried))


def proven(ctx: RepairContext, module: str, declared: Declared, pristine: PristineImport, requirement: str,
           reason: str, attempt: Tried) -> Candidate:
    step = pip_step(ctx.python, attempt.plan, attempt.held)
    why = (f"{module} does not import as shipped ({one_line(pristine.error)[:160]}), though every range "
           f"{declared.name} {declared.version} declares is met; {reason}: {requirement}, with what pip installs "
           f"beside it ({', '.join(attempt.plan)}), laid over the env in a scratch folder, makes it import. Install "
           f"it into the target env (no code patch)")
    evidence = (f"pristine import of {module}: {one_line(pristine.error)[:200]}", f"{reason}: {requirement}",
                *proof_lines(requirement, module, attempt))
    check = Check("import", module)
    patch = env_patch((), rationale=why, origin="derived:host:history", evidence=evidence,
                      checks=(check.describe(),), host_steps=(step,))
    return Candidate(patch, patch.origin, why, evidence, (check,))


def suspects(declared: Declared, fault: Fault, pristine: PristineImport) -> list[Requirement]:
    """The package's requirements the failure runs through (a frame in their modules), then those it names."""
    text = "\n".join([fault.message, pristine.error, pristine.traceback, *(f.file for f in fault.frames)])
    through = [r for r in declared.requires
               if any(re.search(rf"/{re.escape(m)}(/|\.py\b|\.cpython-)", text) for m in r.modules)]
    named = [r for r in declared.requires if r not in through
             and any(re.search(rf"(?<![\w.]){re.escape(m)}(?![\w])", text) for m in r.modules)]
    return [r for r in [*through, *named] if normalize(r.name) != normalize(declared.name)]


Option = tuple[tuple[str, ...], str]  # (requirements to lay over the env, why they are evidence)


def history_options(declared: Declared, suspected: list[Requirement]) -> list[Option]:
    """What to try, in order: what the package's next release pins where the env is outside it (the distributions
    the failure runs through first; all of them together when several), then, for each distribution the failure
    runs through or names, its newest release published before the package's own."""
    times = upload_times(declared.name)
    own, mine = times.get(declared.version), version_of(declared.version)
    later = [v for v in finals(times) if mine and (version_of(v) or mine) > mine]
    following = newest(later, oldest=True) if later else ""
    pins = pins_of(declared.name, following) if following else {}
    ranked = [*suspected, *(r for r in declared.requires if r not in suspected)]
    pinned: list[Option] = []
    for req in ranked:
        pin, installed = pins.get(normalize(req.name)), version_of(req.installed)
        if pin is None or not installed or not str(pin.specifier) or pin.specifier.contains(installed, True):
            continue
        inside = [v for v in finals(upload_times(req.name)) if pin.specifier.contains(v, True)]
        if inside:
            pinned.append(((f"{req.name}=={newest(inside)}",), f"{declared.name} {following}, its next release, "
                           f"requires {req.name}{pin.specifier} (installed: {req.installed})"))
    together: list[Option] = [(tuple(r for o in pinned for r in o[0]), f"{declared.name} {following}, its next "
                               f"release, pins each of them (installed outside)")] if len(pinned) > 1 else []
    before: list[Option] = []
    for req in suspected:
        releases = upload_times(req.name)
        published = [v for v in finals(releases) if own and releases[v] < own]
        if own and published and newest(published) != req.installed:
            before.append(((f"{req.name}=={newest(published)}",), f"the newest {req.name} published before "
                           f"{declared.name} {declared.version} ({own:%Y-%m-%d}; installed: {req.installed})"))
    first: dict[tuple[str, ...], str] = {}
    implicated = [o for o in pinned if any(o[0][0].startswith(f"{r.name}==") for r in suspected)]
    for option, why in [*implicated, *together, *pinned, *before]:
        first.setdefault(option, why)  # one try per set, under the first reason found for it
    return list(first.items())


def pins_of(name: str, version: str) -> dict[str, Spec]:
    out: dict[str, Spec] = {}
    for raw in requires_of(name, version):
        try:
            spec = Spec(raw)
        except InvalidRequirement:
            continue
        if spec.marker is None or spec.marker.evaluate({"extra": ""}):
            out[normalize(spec.name)] = spec
    return out


def version_of(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def finals(versions: Iterable[str]) -> list[str]:
    """The final releases among ``versions`` (no pre-, dev- or unreadable versions)."""
    return [v for v in versions if (parsed := version_of(v)) is not None and not parsed.is_prerelease]


def newest(versions: list[str], oldest: bool = False) -> str:
    pick = min if oldest else max
    return pick(versions, key=lambda v: version_of(v) or Version("0"))

