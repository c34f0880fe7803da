"""The library's own other way: the failing call is reached only because a variable it reads has one value.

vLLM's CPU worker, for instance, binds each rank's threads to a NUMA node when ``VLLM_CPU_OMP_THREADS_BIND`` is
``"auto"`` (its default) and asserts there are enough nodes — with two ranks on a one-node host that assertion is
the fault. The same ``if``/``elif`` chain takes another way for ``"nobind"``. When a library frame of the fault
sits in a branch taken on ``X == "a"``, X was read from the library's env module (``envs.VAR``), and a sibling
branch of the same chain is taken on ``X == "b"``, the remedy sets VAR=b for medic's launches: the library's own
code, not a patch to it. Nothing is proposed when the job already sets VAR, or the chain has no such sibling.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from agent.repair.context import read_source
from agent.repair.edits import Source, conjuncts
from agent.repair.types import Candidate, Fault, RepairContext
from tools import source as src_tools
from tools.diffs import EnvEdit, env_patch
from tools.errors import MedicError


@dataclass(frozen=True)
class Branch:
    var: str  # the environment variable the library reads
    taken: str  # the value whose branch reaches the fault
    other: str  # the value of a sibling branch
    path: str
    line: int  # the sibling branch's test


def other_branch_remedy(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    for frame in reversed(fault.frames):  # the innermost library frame first
        if ctx.is_fixable(frame.file):
            continue
        src = read_source(ctx, frame.file)
        found = branch_around(src.tree, frame.line, frame.file) if src else None
        if found is None or not read_by_library(ctx, found.var) or found.var in (ctx.job_env or {}):
            continue
        why = (f"{frame.file}:{frame.line} runs only when {found.var} is {found.taken!r}; the library's own code "
               f"takes another way when it is {found.other!r} ({found.path}:{found.line}): set it for medic's "
               f"launches (the library is left alone)")
        evidence = (f"{found.path}:{found.line}: the branch for {found.var} == {found.other!r}",)
        patch = env_patch((EnvEdit(var=found.var, action="set", value=found.other),), rationale=why,
                          origin="derived:env:other_branch", evidence=evidence)
        return [Candidate(patch, "derived:env:other_branch", why, evidence)]
    return []


def branch_around(tree: ast.AST, line: int, path: str) -> Branch | None:
    """The innermost ``if X == "a": … elif X == "b":`` chain whose "a" branch holds ``line``, X read from env."""
    func = innermost(tree, line)
    if func is None:
        return None
    env_names = {t.id: attr for node in ast.walk(func) if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name) and (attr := env_attr(node.value))}
    found: Branch | None = None
    for node in ast.walk(func):
        if not isinstance(node, ast.If):
            continue
        chain = branches(node)
        taken = next((c for c, body, _ in chain if c and holds(body, line)), None)
        if taken is None:
            continue
        var = env_names.get(taken[0]) or (taken[0] if taken[0].isupper() else None)
        others = [(c, at) for c, _, at in chain if c and c[0] == taken[0] and c[1] != taken[1]]
        if var and others:  # ast.walk goes outside-in: a later match is an inner chain
            found = Branch(var, taken[1], others[0][0][1], path, others[0][1])
    return found


def innermost(tree: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return max(funcs, key=lambda n: n.lineno, default=None)


def env_attr(node: ast.expr) -> str | None:
    """``envs.VAR`` (how vLLM reads its variables) -> VAR."""
    if isinstance(node, ast.Attribute) and node.attr.isupper() and isinstance(node.value, ast.Name):
        return node.attr
    return None


def compared(test: ast.expr) -> tuple[str, str] | None:
    """``X == "a"`` (alone or the first term of an ``and``) -> (X, "a"); ``envs.VAR == "a"`` -> (VAR, "a")."""
    test = conjuncts(test)[0]
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    value = test.comparators[0]
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return None
    name = test.left.id if isinstance(test.left, ast.Name) else env_attr(test.left)
    return (name, value.value) if name else None


def branches(node: ast.If) -> list[tuple[tuple[str, str] | None, list[ast.stmt], int]]:
    """(what the test compares, the body, the line of the test or of ``else``) for each branch of the chain."""
    out: list[tuple[tuple[str, str] | None, list[ast.stmt], int]] = [(compared(node.test), node.body, node.lineno)]
    rest = node.orelse
    while len(rest) == 1 and isinstance(rest[0], ast.If):
        out.append((compared(rest[0].test), rest[0].body, rest[0].lineno))
        rest = rest[0].orelse
    if rest:
        out.append((None, rest, rest[0].lineno))
    return out


def holds(body: list[ast.stmt], line: int) -> bool:
    return bool(body) and body[0].lineno <= line <= (body[-1].end_lineno or body[-1].lineno)


def read_by_library(ctx: RepairContext, var: str) -> bool:
    """VAR is a variable a library's env module declares (vLLM's ``vllm/envs.py``), not any upper-case name."""
    return any(isinstance(n, ast.Constant) and n.value == var
               for _, src in library_env_modules(ctx) for n in ast.walk(src.tree))


def library_env_modules(ctx: RepairContext) -> list[tuple[str, Source]]:
    """(package, source) of each library's ``<package>.envs`` module in the target env: what it reads, and how."""
    found: list[tuple[str, Source]] = []
    for package in ctx.library_packages:
        try:
            path = src_tools.module_path(ctx.host, ctx.python, f"{package}.envs")
        except MedicError:
            continue
        src = read_source(ctx, path)
        if src is not None:
            found.append((package, src))
    return found
