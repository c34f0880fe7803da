"""Before any change and any load: the job's model is of a class the installed library gives no EAGLE-3 auxiliary
hidden states, so every launch would end at the library's (or speculators') own refusal.

The refusal is a ``raise`` under ``if not supports_eagle3(model)``, in the code the job reaches (speculators' worker,
in process) or in the library (vLLM's model runner, for a server). Each such raise becomes a candidate fault whose
frame is that raise; it is a finding only when agent/repair/limits.py proves the limit from it: the predicate is
``isinstance(model, SupportsEagle3)`` in the installed library, and the model's class, as the library defines it,
reaches that interface through none of its bases. The repair node then stops the session with that sentence, before
the scan's other findings are repaired: nothing is changed for a job no change can run.
"""

from __future__ import annotations

import ast
import contextlib

from agent.repair.context import across_libraries, read_source
from agent.repair.edits import Source, callee_name
from agent.repair.limits import FEATURES, interface_limit, interface_of, model_without
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
from tools import source as src_tools
from tools.errors import MedicError

PREDICATES = tuple(f"supports_{name.lower()}" for name in FEATURES)  # what extraction needs of a model class


def interface_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    if not lacks(ctx):
        return []  # the common case, read from two definitions: no search for the refusal
    for src, line, func in refusals(ctx, sources):
        frame = FrameRef(src.path, line, func, src.line(line).strip())
        limit = interface_limit(ctx, Fault("scan", "PredictedLimit", "", (frame,)))
        if limit is not None:
            return [Fault("scan", "PredictedLimit", limit.sentence(), (frame,), fingerprint=f"limit:{src.path}:{line}",
                          finding=Finding("interface_limit", callee=limit.predicate, name=limit.model_class))]
    return []


Refusal = tuple[Source, int, str]  # the file, the raise's line, its function


def lacks(ctx: RepairContext) -> bool:
    """A model class, as the library defines it, reaches the interface a predicate checks through no base."""
    return any((interface := interface_of(ctx, p)) and model_without(ctx, interface) for p in PREDICATES)


def refusals(ctx: RepairContext, sources: list[Source]) -> list[Refusal]:
    """(source, raise line, function) of each raise under ``if not <predicate>(…)``: the job's code first."""
    found = [hit for src in sources for hit in guarded_raises(src)]
    for name in PREDICATES:
        with contextlib.suppress(MedicError):
            for site in across_libraries(ctx, src_tools.call_sites, name):
                src = read_source(ctx, site.path)
                found += [hit for hit in guarded_raises(src) if hit not in found] if src else []
    return found


def guarded_raises(src: Source) -> list[Refusal]:
    out: list[Refusal] = []
    for func in (n for n in ast.walk(src.tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        for node in ast.walk(func):
            if (isinstance(node, ast.If) and isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
                    and isinstance(node.test.operand, ast.Call) and callee_name(node.test.operand) in PREDICATES):
                out += [(src, stmt.lineno, func.name) for stmt in node.body if isinstance(stmt, ast.Raise)]
    return out

