"""Checks that prove a patch: each kind is a function of the repair context; all answer (ok, detail)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping

from agent.repair.types import Candidate, Check, RepairContext
from tools import pysyntax
from tools import source as src_tools
from tools.envprobe import pristine_import
from tools.errors import HostUnreachable, MedicError
from tools.host import read_text
from tools.requirements import declared_ranges

CheckResult = tuple[bool, str]


def check_compile(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    try:
        pysyntax.check_compiles(read_text(ctx.host, check.target), check.target)
    except SyntaxError as exc:
        return False, f"line {exc.lineno}: {exc.msg}"
    return True, "compiles"


def check_import(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    """Import the patched module in a fresh target-env process (the first thing the next launch will do).

    Before the failure is blamed on a patch, the module is imported again as its wheel shipped it (medic's
    patches set aside): when that fails too, the environment is at fault, not the patch: the check is not ok, and
    says "environment mismatch", which blames no patch (the run shows the environment's fault, and its repair is
    the environment's)."""
    result = ctx.host.run([ctx.python, "-c", f"import {check.target}"], timeout=600, env=dict(env))
    if result.ok:
        return True, f"{check.target} imports in the target env"
    last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
    try:
        pristine = pristine_import(ctx.host, ctx.python, check.target, ctx.medic_dir, env)
    except HostUnreachable:
        raise
    except MedicError:  # cannot tell: the patch stays the suspect, as before
        return False, last[:300]
    if pristine.ok is False:  # not ok, yet not the patch's failing (blames_patch): the env's
        return False, (f"{ENVIRONMENT_MISMATCH} {check.target} does not import as shipped either, with medic's "
                       f"patches set aside ({pristine.error[:200]})")
    return False, last[:300]


def check_in_range(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    """The installed ``check.detail`` is inside the range ``check.target`` declares for it (a host step ran)."""
    declared = declared_ranges(ctx.host, ctx.python, check.target)
    req = next((r for r in declared.requires if r.name == check.detail), None)
    if req is None:
        return False, f"{check.target} declares no range for {check.detail}, or it is not installed"
    where = "inside" if req.inside else "outside"
    return req.inside, f"{req.name} {req.installed} is {where} {check.target}'s {req.specifier}"


def check_signature_has(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    sig = src_tools.signature(ctx.host, ctx.python, check.target)
    names = [p.name for p in sig.params]
    if not check.detail:
        return True, f"{check.target} found"
    ok = check.detail in names or sig.rejects_keyword(check.detail) is False
    return ok, f"{check.target}({', '.join(names)})"


def check_member_exists(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    members = {m.name for m in src_tools.class_members(ctx.host, ctx.python, check.target)}
    ok = check.detail in members
    return ok, f"{check.target} {'has' if ok else 'has no'} {check.detail}"


def check_grep(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    text = read_text(ctx.host, check.target)
    ok = re.search(check.detail, text, re.M) is not None
    return ok, f"{check.detail!r} {'found' if ok else 'not found'} in {check.target}"


def check_disk_free(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    """Room for the outputs: a run that extracts for an hour and then cannot save is the worst kind of fail."""
    result = ctx.host.run(["df", "-Pk", check.target], timeout=30)
    try:
        free_mb = int(result.stdout.strip().splitlines()[-1].split()[3]) // 1024
    except (IndexError, ValueError):
        return False, f"cannot read free space of {check.target}: {result.stderr.strip()[:120]}"
    return free_mb >= int(check.detail or 1024), f"{free_mb} MB free in {check.target} (want {check.detail} MB)"


def check_free_memory(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    result = ctx.host.run("grep MemAvailable /proc/meminfo", timeout=30)
    try:
        free_mb = int(result.stdout.split()[1]) // 1024
    except (IndexError, ValueError):
        return True, "no /proc/meminfo on the host: not checked"
    return free_mb >= int(check.detail or 1024), f"{free_mb} MB available (want {check.detail} MB)"


def check_stale_runs(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    """Earlier launches of this session still alive hold memory and ports: stop them."""
    from tools import runs

    stale = []
    for run_dir in filter(None, check.detail.split("|")):
        run = runs.Run.in_dir(run_dir)
        if runs.status(ctx.host, run).state == "running":
            runs.stop(ctx.host, run)
            stale.append(run.id)
    return not stale, f"stopped stale run(s) {', '.join(stale)}" if stale else "no earlier run still alive"


def check_library_found(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    from agent.repair.derived_env import find_library

    found = find_library(ctx, check.target)
    return found is not None, f"{check.target}: {found}" if found else f"no {check.target} on {ctx.host.name}"


ADVISORY = ("disk_free", "free_memory", "stale_runs")  # say so, but never blame a patch for them
ENVIRONMENT_MISMATCH = "environment mismatch:"


def blames_patch(kind: str, detail: str) -> bool:
    """Whether a failed check is the patch's failing: not the host's own checks, nor a module that does not
    import as shipped either."""
    return kind not in ADVISORY and not detail.startswith(ENVIRONMENT_MISMATCH)

RUNNERS: dict[str, Callable[[RepairContext, Check, Mapping[str, str]], CheckResult]] = {
    "disk_free": check_disk_free,
    "free_memory": check_free_memory,
    "stale_runs": check_stale_runs,
    "compile": check_compile,
    "import": check_import,
    "signature_has": check_signature_has,
    "member_exists": check_member_exists,
    "grep": check_grep,
    "library_found": check_library_found,
    "in_range": check_in_range,
}


def run_before_checks(ctx: RepairContext, cand: Candidate, env: Mapping[str, str],
                      record: Callable[[dict[str, object]], None]) -> list[dict[str, object]]:
    """The candidate's checks that need no launch, in order, up to the first that fails; each one recorded."""
    results: list[dict[str, object]] = []
    for check in cand.checks:
        if check.when != "before":
            continue
        ok, detail = run_check(ctx, check, env)
        results.append({"patch_id": cand.patch.id, "check": check.describe(), "ok": ok, "detail": detail,
                        "when": "before"})
        record(results[-1])
        if not ok:
            break
    return results


# import each module named, in order, in one process, up to the first that fails; say which imported. Before
# each, every module of the named modules' own packages is forgotten: each is imported afresh (an import cycle
# among them shows as it would in a process of its own); only what they import from elsewhere stays loaded
IMPORT_EACH = """
import importlib, json, sys
names = sys.argv[1:]
own = {name.split(".")[0] for name in names}
done = []
for name in names:
    for loaded in [m for m in sys.modules if m.split(".")[0] in own]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        break
    done.append(name)
print(json.dumps(done))
"""


def run_leading(ctx: RepairContext, pending: list[Check], env: Mapping[str, str]) -> list[CheckResult]:
    """The first pending check's result; when it and the checks after it import modules, theirs too, from one
    process: each module that imports there, afresh (IMPORT_EACH), is proven — the library, imported once, is
    most of each import's cost — and the first that does not is left to its own check (run_check: its error,
    its pristine import)."""
    imports = list(itertools.takewhile(lambda check: check.kind == "import", pending))
    if len(imports) > 1:
        result = ctx.host.run([ctx.python, "-c", IMPORT_EACH, *(c.target for c in imports)], timeout=600,
                              env=dict(env))
        try:
            done = json.loads((result.stdout.strip().splitlines() or ["[]"])[-1])
        except ValueError:
            done = []
        proven = list(itertools.takewhile(lambda c: c.target in done, imports))
        if proven:
            return [(True, f"{c.target} imports in the target env") for c in proven]
    return [run_check(ctx, pending[0], env)]


def run_check(ctx: RepairContext, check: Check, env: Mapping[str, str] | None = None) -> CheckResult:
    try:
        return RUNNERS[check.kind](ctx, check, env or {})
    except HostUnreachable:
        raise  # the link, not the patch: the caller waits for the host and asks again
    except MedicError as err:
        return False, str(err)
