"""The scan's signature detector: calls to names imported from a library, against the INSTALLED signature —
unexpected keywords and missing required arguments (a dataclass or pydantic field without a default counts),
each only where the record proves it (``Signature.rejects_keyword`` / ``missing_required``: a decorator's
wrapper or a class layer that cannot be read leaves the call alone)."""

from __future__ import annotations

import ast

from agent.repair.edits import Source, callee_name
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
from tools import source as src_tools
from tools.errors import MedicError


def signature_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    calls = [(src, call, name, module) for src in sources
             for call in (n for n in ast.walk(src.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name))
             if (name := callee_name(call)) and (module := src.imported_from(name))
             and module.split(".")[0] in ctx.api_packages(src.path)]
    learn_signatures(ctx, [f"{module}:{name}" for *_, name, module in calls])
    faults: list[Fault] = []
    for src, call, name, module in calls:
        if ctx.memo[f"signature:{module}:{name}"] is not None:
            faults += drift_at(src, call, name, ctx.memo[f"signature:{module}:{name}"])
    return faults


def learn_signatures(ctx: RepairContext, targets: list[str]) -> None:
    """Each ``module:name``'s installed signature into ``ctx.memo["signature:…"]`` (None: unreadable), every one
    not yet known from one probe process; the detectors run side by side, and the first answer stays."""
    asked = [t for t in dict.fromkeys(targets) if f"signature:{t}" not in ctx.memo]
    try:
        answers: dict[str, object] = dict(src_tools.signatures(ctx.host, ctx.python, asked)) if asked else {}
    except MedicError:
        answers = {}
    for target in asked:
        sig = answers.get(target)
        ctx.memo.setdefault(f"signature:{target}", sig if isinstance(sig, src_tools.Signature) else None)


def drift_at(src: Source, call: ast.Call, name: str, sig: src_tools.Signature) -> list[Fault]:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return []  # *args / **kwargs at the call: cannot tell statically
    func = src.enclosing_function(call.lineno)
    frame = FrameRef(src.path, call.lineno, func.name if func else "<module>", src.line(call.lineno).strip())
    found: list[Fault] = []
    for kw in call.keywords:  # only what the OUTERMOST callable provably rejects (decorators, classes...)
        if kw.arg and sig.rejects_keyword(kw.arg) is True:
            found.append(Fault("scan", "TypeError", f"{name}() got an unexpected keyword argument '{kw.arg}'",
                               (frame,), fingerprint=f"scan:{name}:{kw.arg}",
                               finding=Finding("unexpected_kwarg", callee=name, name=kw.arg)))
    given = {k.arg for k in call.keywords if k.arg}
    for param in sig.missing_required(given, len(call.args)) or []:
        found.append(Fault("scan", "TypeError", f"{name}() missing 1 required positional argument: '{param}'",
                           (frame,), fingerprint=f"scan:{name}:{param}",
                           finding=Finding("missing_argument", callee=name, name=param)))
    return found
