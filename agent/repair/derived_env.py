"""Derived environment remedies: give the job what the library's own check demands of its environment.

- a check of the form ``if NAME not in os.environ.get(VAR): raise`` (agent/repair/env_checks.py) raised, or
  the scan predicts it will: prepend the library NAME names to VAR (a path list such as LD_PRELOAD), found in
  the target env first, then on the host (``ldconfig -p``); when the host has no such library, the remedy is
  a host step — the Debian package the host's own ``apt-cache`` names — that only a person (or a policy rule)
  takes, with the env edit resolved once the library is there;
- a message that asks for one of the choices of a variable the library reads with a fixed set of choices
  (``'spawn'`` for a worker start method): set that variable to that choice.
Never a patch to the library: its check stays, the job's environment changes.
"""

from __future__ import annotations

import re
import shlex

from agent.repair.context import read_source
from agent.repair.derived_env_branch import library_env_modules, other_branch_remedy
from agent.repair.env_checks import EnvCheck, EnvChoice, bind_message, env_checks, env_choices
from agent.repair.types import Candidate, Check, Fault, RepairContext
from tools.diffs import EnvEdit, env_patch

LIBRARY = re.compile(r"^lib[\w+-]*$")
NOT_THE_LIBRARY = re.compile(r"stub|_db\b|_db\.|debug|\.dbg|\.a$")  # look-alikes that are not the runtime
LIBRARY_MEMO = "library:"  # ctx.memo keys of find_library's answers (a host step can change them)
QUOTED = re.compile(r"""['"`]([\w.+-]+)['"`]""")


def environment_remedy(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None and fault.finding.kind == "env_choice":  # the scan read which choice is asked for
        why = (f"{fault.summary}: on this device the job's workers must use {fault.finding.name!r}; the library "
               f"reads {fault.finding.callee} at {fault.finding.detail}: set it for medic's launches")
        return [remedy(EnvEdit(var=fault.finding.callee, action="set", value=fault.finding.name), why,
                       "derived:env:library_choice", (f"{fault.finding.detail}: {fault.finding.callee}",))]
    if fault.finding is not None:
        if fault.finding.kind != "environment":
            return []
        check = EnvCheck(fault.finding.callee, fault.finding.name, *where(fault.finding.detail), template="")
        return required_in_env(ctx, check)
    for check in raised_checks(ctx, fault):
        return required_in_env(ctx, check)
    return choice_asked_for(ctx, fault) or other_branch_remedy(ctx, fault)


def where(detail: str) -> tuple[str, int]:
    path, _, line = detail.rpartition(":")
    return path, int(line) if line.isdigit() else 0


def raised_checks(ctx: RepairContext, fault: Fault) -> list[EnvCheck]:
    """The library env checks whose raise is the fault's innermost library frame and whose message it is."""
    for frame in reversed(fault.frames):
        if ctx.is_fixable(frame.file):
            continue
        src = read_source(ctx, frame.file)
        if src is None:
            continue
        checks = [c for c in env_checks(src) if c.line <= frame.line <= c.line + 12]
        named = [c for c in checks if c.required in bind_message(c.template, fault.message)]
        return named or [c for c in checks if c.required in fault.message]
    return []


def required_in_env(ctx: RepairContext, check: EnvCheck) -> list[Candidate]:
    if not LIBRARY.match(check.required):
        return []  # only library names are derived here: another demand is the person's to read
    at = f"{check.path}:{check.line}" if check.path else "the library"
    found = find_library(ctx, check.required)
    evidence = (f"{at}: raises unless {check.var} contains {check.required!r}",)
    if found:
        why = (f"the library's check at {at} demands {check.required} in {check.var}; {found} is there: "
               f"prepend it to {check.var} for medic's launches (the check stays)")
        return [remedy(EnvEdit(var=check.var, action="prepend", value=found), why, "derived:env:required_library",
                       (*evidence, f"found: {found}"), (Check("library_found", check.required),))]
    package = debian_package(ctx, check.required)
    if package is None:
        return []
    step = f"apt-get install -y {shlex.quote(package)}"
    why = (f"the library's check at {at} demands {check.required} in {check.var}, and no {check.required} is "
           f"on {ctx.host.name}: install {package} (its apt-cache names it), then medic prepends it")
    return [remedy(EnvEdit(var=check.var, action="prepend", library=check.required), why, "derived:host:package",
                   (*evidence, f"apt-cache: {package}"), (Check("library_found", check.required),), (step,))]


def remedy(edit: EnvEdit, why: str, origin: str, evidence: tuple[str, ...], checks: tuple[Check, ...] = (),
           host_steps: tuple[str, ...] = ()) -> Candidate:
    """One env edit (and the host steps it needs first) as a candidate, its checks named in the patch too."""
    patch = env_patch((edit,), rationale=why, origin=origin, evidence=evidence,
                      checks=tuple(c.describe() for c in checks), host_steps=host_steps)
    return Candidate(patch, origin, why, evidence, checks)


def find_library(ctx: RepairContext, name: str) -> str | None:
    """A file of the shared library ``name`` (``libfoo``): the target env's own first, then the host's."""
    memo = f"{LIBRARY_MEMO}{name}"
    if memo in ctx.memo:
        return ctx.memo[memo]
    prefix = ctx.python.rsplit("/bin/", 1)[0] if "/bin/" in ctx.python else ""
    folders = [f for f in (f"{prefix}/lib" if prefix else "", *ctx.site_packages) if f]
    probe = " ".join(shlex.quote(f) for f in folders)
    found = ctx.host.run(
        f"for d in {probe}; do find \"$d\" -maxdepth 3 -name {shlex.quote(name + '*.so*')} 2>/dev/null; done; "
        f"ldconfig -p 2>/dev/null | awk '{{print $NF}}' | grep -F /{shlex.quote(name)} ; true", timeout=120)
    paths = [p for p in found.stdout.split() if p.startswith("/") and not NOT_THE_LIBRARY.search(p.rsplit("/", 1)[-1])]
    # libfoo.so / libfoo5.so before libfoo_minimal.so before anything longer
    paths.sort(key=lambda p: (not re.match(re.escape(name) + r"\d*\.so", p.rsplit("/", 1)[-1]), len(p)))
    ctx.memo[memo] = paths[0] if paths else None
    return ctx.memo[memo]


def debian_package(ctx: RepairContext, name: str) -> str | None:
    """The Debian package the host's apt-cache lists for a library name (``libtcmalloc`` -> libtcmalloc-minimal4)."""
    stem = name.replace("_", "-").lower()
    answer = ctx.host.run(f"command -v apt-cache >/dev/null && apt-cache search --names-only "
                          f"{shlex.quote('^' + re.escape(stem))} 2>/dev/null", timeout=120)
    names = [line.split(" - ", 1)[0].strip() for line in answer.stdout.splitlines() if " - " in line]
    runtime = [n for n in names if not re.search(r"-(dev|dbg|doc|tools)$", n)]
    return min(runtime, key=len) if runtime else None


def choices_asked(ctx: RepairContext, message: str) -> list[tuple[EnvChoice, str]]:
    """(the library's variable, the choice) for each variable the library reads with a fixed set of choices whose
    name the message speaks of and one of whose non-default choices it asks for in quotes (``the 'spawn' start
    method`` -> VLLM_WORKER_MULTIPROC_METHOD, 'spawn')."""
    asked = set(QUOTED.findall(message))
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", message)}
    if not asked:
        return []
    out: list[tuple[EnvChoice, str]] = []
    for package, src in library_env_modules(ctx):
        for choice in env_choices(src):
            tokens = {t.lower() for t in choice.var.split("_")} - {package.lower()}
            wanted = [c for c in choice.choices if c in asked and c != choice.default]
            if wanted and tokens & words:
                out.append((choice, wanted[0]))
    return out


def choice_asked_for(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    """A message asking for ``'x'``, where x is a choice of a variable the library reads whose name the message
    also speaks of (``… must use the 'spawn' start method`` -> VLLM_WORKER_MULTIPROC_METHOD=spawn)."""
    out: list[Candidate] = []
    for choice, wanted in choices_asked(ctx, fault.message):
        why = (f"the error asks for {wanted!r}; the library reads {choice.var} (choices "
               f"{', '.join(choice.choices)}, default {choice.default}) at {choice.path}:{choice.line}: "
               f"set it for medic's launches")
        out.append(remedy(EnvEdit(var=choice.var, action="set", value=wanted), why, "derived:env:library_choice",
                          (f"{choice.path}:{choice.line}: {choice.var} in {choice.choices}",)))
    return out
