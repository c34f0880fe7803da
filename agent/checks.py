"""Checks that prove a patch: each kind is a function of the repair context; all answer (ok, detail)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from agent.repair.types import Check, RepairContext
from tools import source as src_tools
from tools.errors import MedicError
from tools.host import read_text

CheckResult = tuple[bool, str]


def check_compile(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    try:
        compile(read_text(ctx.host, check.target), check.target, "exec")
    except SyntaxError as exc:
        return False, f"line {exc.lineno}: {exc.msg}"
    return True, "compiles"


def check_import(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    """Import the patched module in a fresh target-env process (the first thing the next launch will do)."""
    result = ctx.host.run([ctx.python, "-c", f"import {check.target}"], timeout=600, env=dict(env))
    if result.ok:
        return True, f"{check.target} imports in the target env"
    last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
    return False, last[:300]


def check_signature_has(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    sig = src_tools.signature(ctx.host, ctx.python, check.target)
    names = [p.name for p in sig.params]
    if not check.detail:
        return True, f"{check.target} found"
    ok = check.detail in names or any(p.kind == "var_keyword" for p in sig.params)
    return ok, f"{check.target}({', '.join(names)})"


def check_member_exists(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    members = {m.name for m in src_tools.class_members(ctx.host, ctx.python, check.target)}
    ok = check.detail in members
    return ok, f"{check.target} {'has' if ok else 'has no'} {check.detail}"


def check_grep(ctx: RepairContext, check: Check, env: Mapping[str, str]) -> CheckResult:
    text = read_text(ctx.host, check.target)
    ok = re.search(check.detail, text, re.M) is not None
    return ok, f"{check.detail!r} {'found' if ok else 'not found'} in {check.target}"


RUNNERS: dict[str, Callable[[RepairContext, Check, Mapping[str, str]], CheckResult]] = {
    "compile": check_compile,
    "import": check_import,
    "signature_has": check_signature_has,
    "member_exists": check_member_exists,
    "grep": check_grep,
}


def run_check(ctx: RepairContext, check: Check, env: Mapping[str, str] | None = None) -> CheckResult:
    try:
        return RUNNERS[check.kind](ctx, check, env or {})
    except MedicError as err:
        return False, str(err)
