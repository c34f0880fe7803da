"""The library refuses the job's settings and names, in its own words, the switch of its own CLI that turns the
refused feature off.

vLLM 0.23.0 validates its config at server start: ``if kv_transfer_config.kv_connector ==
"ExampleHiddenStatesConnector" and scheduler_config.enable_chunked_prefill: raise ValueError("… does not support
chunked prefill. Please disable chunked prefill (`--no-enable-chunked-prefill`).")``. The message is untrusted (a
log is), so nothing is taken from it but which option to look for; the rest is read from the installed library:
- the ``raise`` whose message text is the fault's and names the option, in the library's own source;
- the switch, in the library's own CLI (its engine-args classes' parser, asked in the target env): the field it
  sets and the value it sets it to (``--no-X`` of a boolean option sets ``X`` False);
- the ``if`` that guards the raise reads that field as one of its conjuncts (``and …enable_chunked_prefill``, or
  ``and not …X`` for a switch that sets True), so with the switch the condition is false and the raise is not
  reached.
The remedy sets the switch on the command that runs the library's CLI (the server's, for a two-process job): the
job's files and the library are left alone, and the relaunch, the check and the necessity oracle judge it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from agent.repair.context import asked_once, grep_sources, one_line
from agent.repair.derived_option_branch import library_cli
from agent.repair.edits import conjuncts
from agent.repair.option_probe import CLI_ACTIONS, MARK, run_probe
from agent.repair.types import Candidate, Fault, RepairContext
from tools.diffs import ArgEdit, arg_patch

ORIGIN = "derived:option:named_switch"
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b|(?<![\w-])--[a-z]{3,}\b")

SWITCH_PROBE = CLI_ACTIONS + r'''
import json, sys

spec = json.loads(sys.argv[1])
found = {}
for a in cli_actions(spec["package"]):
    for option in spec["options"]:
        if option in a.option_strings and option not in found:
            if isinstance(a, argparse.BooleanOptionalAction):
                sets = not option.startswith("--no-")
            elif a.nargs == 0 and isinstance(a.const, bool):
                sets = a.const
            else:
                sets = None  # it takes a value: not a switch
            found[option] = {"dest": a.dest, "sets": sets}
print("''' + MARK + '''" + json.dumps(found))
'''


@dataclass(frozen=True)
class Refusal:
    """A ``raise`` of the library whose message names the option, and the ``if`` that guards it."""

    path: str
    line: int  # the raise's
    test: ast.expr
    test_line: int
    test_text: str


def named_switch(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    options = list(dict.fromkeys(OPTION.findall(fault.message)))
    command = ctx.server_command or ctx.job_command
    if not options or fault.finding is not None or not library_cli(command, ctx.library_packages):
        return []  # an in-process job sets the field in its code: its keyword, not a switch of a command
    for package in ctx.library_packages:
        switches = switches_of(ctx, package, options)
        for option in options:
            switch = switches.get(option)
            if not switch or switch.get("sets") is None or option in command:
                continue
            for refusal in refusals(ctx, package, option, fault.message):
                if turned_off(refusal.test, switch["dest"], bool(switch["sets"])):
                    return [remedy(ctx, option, switch, refusal)]
    return []


def refusals(ctx: RepairContext, package: str, option: str, message: str) -> Iterator[Refusal]:
    """The library's raises that name ``option`` and whose message text the fault's message holds."""
    said = " ".join(message.split())
    for src in grep_sources(ctx, package, re.escape(option)):
        for guard in ast.walk(src.tree):
            if not isinstance(guard, ast.If):
                continue
            for stmt in guard.body:
                if isinstance(stmt, ast.Raise) and raises_text(stmt, option, said):
                    yield Refusal(src.path, stmt.lineno, guard.test, guard.test.lineno, src.segment(guard.test))


def raises_text(stmt: ast.Raise, option: str, said: str) -> bool:
    """The raise's message names the option and each literal piece of it is in what the fault said."""
    pieces = [" ".join(p.split()) for p in literal_pieces(stmt.exc)]
    return option in " ".join(pieces) and all(p in said for p in pieces if p)


def literal_pieces(exc: ast.expr | None) -> list[str]:
    """The literal text of the exception's message (an f-string's constant parts)."""
    if not isinstance(exc, ast.Call) or not exc.args:
        return []
    first = exc.args[0]
    parts = first.values if isinstance(first, ast.JoinedStr) else [first]
    return [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]


def turned_off(test: ast.expr, dest: str, sets: bool) -> bool:
    """Whether setting the field ``dest`` to ``sets`` makes the guard false: it is one of the guard's conjuncts,
    read as is (a switch that sets False) or negated (a switch that sets True)."""
    for part in conjuncts(test):
        negated = isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not)
        read = part.operand if isinstance(part, ast.UnaryOp) and negated else part
        if isinstance(read, ast.Attribute) and read.attr == dest and negated == sets:
            return True
    return False


def switches_of(ctx: RepairContext, package: str, options: list[str]) -> dict[str, Any]:
    """What each option is in the library's own CLI, asked of the target env."""
    spec = {"package": package, "options": options}
    return asked_once(ctx, f"switches:{package}:{','.join(options)}", lambda: run_probe(
        ctx, SWITCH_PROBE, spec, f"what {', '.join(options)} is in {package}'s CLI"))


def remedy(ctx: RepairContext, option: str, switch: dict[str, Any], refusal: Refusal) -> Candidate:
    dest, sets = switch["dest"], bool(switch["sets"])
    said = (f"the library refuses at {refusal.path}:{refusal.line} when `{one_line(refusal.test_text)}`, and names "
            f"{option}, a switch of its own CLI that sets {dest}={sets}, which makes that condition false")
    evidence = (f"{refusal.path}:{refusal.test_line}: if {one_line(refusal.test_text)}: raise …({option})",
                f"{option}: {dest}={sets} (the library's CLI parser)")
    return on_the_command(ctx, option, ORIGIN, said, evidence)


def on_the_command(ctx: RepairContext, option: str, origin: str, said: str, evidence: tuple[str, ...]) -> Candidate:
    """``option`` set on the command that runs the library's CLI (the server's, for a two-process job), for the
    reason ``said``."""
    which: Literal["job", "server"] = "server" if ctx.server_command else "job"
    why = (f"{said}: set it on the {which}'s command for medic's launches (the library and the job's files are left "
           "alone)")
    edit = ArgEdit(option=option, value=None, command=which)
    return Candidate(arg_patch((edit,), rationale=why, origin=origin, evidence=evidence), origin, why, evidence)

