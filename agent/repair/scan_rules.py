"""Scan rules for drift a signature cannot show, each derived from the installed source, never from a list:

- protocol: the library's own state errors ("next() must be called after prev()") name a step it enforces;
  a function of ours that calls ``prev`` and never ``next`` will raise that error.
- return shape: we index ``[0]`` the result of a library call whose callers in the library (passing our
  keywords) all use it whole: the call now returns one value, and ``[0]`` takes a piece of it.
- device: a ``torch.cuda`` call with constant arguments, not under a device test, is evaluated in the target
  env when that env has no CUDA device; the error it raises there is the one the run would raise. The call
  graph is followed one call into the fixable code (agent/repair/callgraph.py): a helper's call whose
  arguments are its parameters is evaluated with the constants our call passes, and reported with both frames.

Each finding is a Fault the repair engine already knows how to fix (the runtime error, or the shape drift's
own message), pointing at our line.
"""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Iterator

from agent.repair.callgraph import bind_constants, reached
from agent.repair.context import grep_sources
from agent.repair.derived_dataflow import (
    MUST_CALL,
    SHAPE_DRIFT,
    indexed_call_result,
    library_indexes_result,
)
from agent.repair.derived_values import Substitute
from agent.repair.edits import Source, callee_name
from agent.repair.types import Fault, Finding, FrameRef, RepairContext

Function = ast.FunctionDef | ast.AsyncFunctionDef
DEVICE_TESTS = ("cuda", "is_available", "platform", "device")  # an `if` on these already picks the device
DEVICE_PROBE = r"""
import json, sys, traceback
exprs = json.loads(sys.argv[1])
import torch
out = {"available": bool(torch.cuda.is_available()), "raised": {}}
if not out["available"]:  # only where no GPU can be touched
    for expr in exprs:
        try:
            eval(expr, {"torch": torch})
        except Exception as exc:
            frames = [f for f in traceback.extract_tb(exc.__traceback__)[1:] if f.filename != "<string>"]
            out["raised"][expr] = {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300],
                                   "frames": [[f.filename, f.lineno, f.name, f.line or ""] for f in frames]}
print(json.dumps(out))
"""


def functions(src: Source) -> Iterator[Function]:
    for node in ast.walk(src.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def frame_at(src: Source, func: Function, lineno: int) -> FrameRef:
    return FrameRef(src.path, lineno, func.name, src.line(lineno).strip())


# -- protocol ---------------------------------------------------------------------------------------------
def library_protocols(ctx: RepairContext) -> list[tuple[str, str, str, str]]:
    """(next, prev, the library's message, where it says so) for each "must be called after" it enforces."""
    if "protocols" not in ctx.memo:
        found: list[tuple[str, str, str, str]] = []
        for package in ctx.library_packages:
            for lib in grep_sources(ctx, package, r"must be called"):
                for node in ast.walk(lib.tree):
                    if isinstance(node, ast.Constant) and isinstance(node.value, str):
                        match = MUST_CALL.search(node.value)
                        if match and (match["next"], match["prev"]) not in {(f[0], f[1]) for f in found}:
                            found.append((match["next"], match["prev"], node.value.strip(),
                                          f"{lib.path}:{node.lineno}"))
        ctx.memo["protocols"] = found
    return list(ctx.memo["protocols"])


def protocol_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    faults: list[Fault] = []
    for nxt, prev, message, where in library_protocols(ctx):
        for src in sources:
            for func in functions(src):
                calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
                ours = [c for c in calls if c.func.attr == prev]  # type: ignore[attr-defined]
                if ours and not any(callee_name(c) == nxt for c in calls):
                    faults.append(Fault("scan", "RuntimeError", message, (frame_at(src, func, ours[0].lineno),),
                                        fingerprint=f"scan:protocol:{prev}:{nxt}:{src.path}:{func.name}",
                                        log_excerpt=f"predicted by the scan: the library raises this at {where}",
                                        finding=Finding("protocol_step", callee=prev, name=nxt, detail=where)))
    return faults


# -- return shape ------------------------------------------------------------------------------------------
def shape_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    faults: list[Fault] = []
    for src in sources:
        for func in functions(src):
            for node in ast.walk(func):
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Subscript)):
                    continue
                found = indexed_call_result(src, func, node.targets[0].id, node.lineno + 1)
                if found is None or found[0] is not node:
                    continue
                _, subscript, call = found
                keywords = sorted(k.arg for k in call.keywords if k.arg)
                key = f"indexes:{callee_name(call)}:{','.join(keywords)}"
                if key not in ctx.memo:
                    ctx.memo[key] = library_indexes_result(ctx, src, call)
                if ctx.memo[key] is None:
                    continue
                message = (f"{callee_name(call)}({', '.join(f'{k}=...' for k in keywords)}) {SHAPE_DRIFT}, and "
                           f"`{src.segment(subscript)}` indexes it")
                faults.append(Fault("scan", "ReturnShapeDrift", message, (frame_at(src, func, node.lineno),),
                                    fingerprint=f"scan:shape:{src.path}:{src.segment(subscript)}",
                                    log_excerpt="\n".join(ctx.memo[key]),
                                    finding=Finding("return_shape", callee=callee_name(call) or "",
                                                    name=src.segment(subscript))))
    return faults


# -- device ------------------------------------------------------------------------------------------------
def guarded_nodes(func: Function) -> set[int]:
    """Nodes under an ``if``/``try`` that already deals with the device (or after an early ``return``/``raise``
    on a device test)."""
    guarded: set[int] = set()
    for node in ast.walk(func):
        tests_device = isinstance(node, ast.If | ast.IfExp | ast.While) and any(
            word in ast.unparse(node.test) for word in DEVICE_TESTS)
        if tests_device or (isinstance(node, ast.Try) and node.handlers):
            guarded |= {id(n) for n in ast.walk(node)}
        if tests_device and isinstance(node, ast.If) and isinstance(node.body[-1], ast.Return | ast.Raise):
            guarded |= {id(n) for n in ast.walk(func) if getattr(n, "lineno", 0) > (node.end_lineno or 0)}
    return guarded


def device_call_exprs(func: Function, bound: dict[str, ast.expr]) -> Iterator[tuple[ast.Call, str]]:
    """Unguarded ``torch.cuda.<f>(...)`` calls of ``func`` whose arguments are constants, or parameters ``bound``
    to constants: each with the expression to evaluate."""
    guarded = guarded_nodes(func)
    for node in ast.walk(func):
        if (isinstance(node, ast.Call) and id(node) not in guarded and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func.value) == "torch.cuda"
                and all(isinstance(a, ast.Constant) or (isinstance(a, ast.Name) and a.id in bound)
                        for a in [*node.args, *(k.value for k in node.keywords)])):
            yield node, ast.unparse(Substitute(bound).visit(copy.deepcopy(node)))


def device_calls(src: Source) -> Iterator[tuple[Function, ast.Call, str]]:
    """``torch.cuda.<f>(<constants>)`` calls written in ``src``, not under a device test."""
    for func in functions(src):
        for call, expr in device_call_exprs(func, {}):
            yield func, call, expr


def helper_device_calls(ctx: RepairContext, src: Source) -> Iterator[tuple[tuple[FrameRef, ...], str, str]]:
    """``torch.cuda`` calls one call away: in a fixable helper a function of ``src`` calls (not under a device
    test), with the helper's parameters bound to the constants that call passes. (frames, where, expression)."""
    for func in functions(src):
        guarded = guarded_nodes(func)
        for call, hsrc, helper in reached(ctx, src, func):
            if id(call) in guarded or helper is func:
                continue
            method = isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "self"
            for inner, expr in device_call_exprs(helper, bind_constants(helper, call, method=method)):
                frames = (frame_at(src, func, call.lineno), frame_at(hsrc, helper, inner.lineno))
                yield frames, f"{hsrc.path}:{helper.name}", expr


def device_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    if ctx.device == "cuda":  # the job's target says it runs on CUDA: a call evaluated here proves nothing there
        return []
    sites: list[tuple[tuple[FrameRef, ...], str, str]] = [
        ((frame_at(src, func, call.lineno),), f"{src.path}:{func.name}", expr)
        for src in sources for func, call, expr in device_calls(src)]
    direct = {(f[0].file, f[0].line) for f, _, _ in sites}
    sites += [site for src in sources for site in helper_device_calls(ctx, src) if (site[0][-1].file,
              site[0][-1].line) not in direct]  # a helper the scan reads itself is reported where it calls
    # each expression is asked once a session (it imports torch: seconds): after the patch of one device call the
    # scan runs again over the others, whose answers it has
    exprs = sorted({expr for *_, expr in sites if f"device:{expr}" not in ctx.memo})
    if exprs:
        result = ctx.host.run([ctx.python, "-c", DEVICE_PROBE, json.dumps(exprs)], timeout=120)
        answer = result.last_json()  # the probe's last line, as every probe's answer is read
        raised_by = answer.get("raised", {}) if isinstance(answer, dict) else {}
        for expr in exprs:  # no answer (the probe died) is no finding, as before
            ctx.memo[f"device:{expr}"] = raised_by.get(expr)
    faults: list[Fault] = []
    for frames, where, expr in sites:
        raised = ctx.memo.get(f"device:{expr}")
        fingerprint = f"scan:device:{where}:{expr}"
        if raised is None or any(f.fingerprint == fingerprint for f in faults):
            continue
        lib_frames = tuple(FrameRef(f, n, name, code) for f, n, name, code in raised["frames"])
        faults.append(Fault("scan", raised["type"], raised["message"], (*frames, *lib_frames),
                            fingerprint=fingerprint,
                            log_excerpt=f"predicted by the scan: `{expr}` raised this in the target env",
                            finding=Finding("device_call", callee=expr)))
    return faults
