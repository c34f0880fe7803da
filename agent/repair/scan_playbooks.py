"""The playbooks' detector: a known fault a playbook says how to predict, found before any launch.

A playbook whose remedy adds a keyword to a call may say ``predict: keyword_left_at_default``: the fault it
knows follows from a call that leaves that keyword to the callee's own default, when the INSTALLED callee's
default is not the value the remedy sets (vLLM's ``CacheConfig`` turns prefix caching on unless told otherwise;
an extractor that builds one without saying so crashes, or worse, captures short rows). Both facts are read here:
the call in the code the driver reaches, the default from the installed signature. A default that cannot be
read (a signature not exact, a default computed at run time) is no finding: the canary still runs.

The finding names the playbook; the engine answers it with that playbook's remedy alone (agent/repair/playbooks.py).
"""

from __future__ import annotations

import ast

from agent.repair.edits import Source
from agent.repair.playbooks import Playbook, load_playbooks
from agent.repair.scan_signatures import learn_signatures
from agent.repair.types import Fault, Finding, FrameRef, RepairContext
from tools import source as src_tools


def predictable(books: list[Playbook]) -> list[Playbook]:
    return [b for b in books if b.predict == "keyword_left_at_default"]  # an add_keyword remedy (Playbook says)


def playbook_drift(ctx: RepairContext, sources: list[Source]) -> list[Fault]:
    books = predictable(load_playbooks())
    sites: list[tuple[Playbook, Source, ast.Call, str]] = []
    for book in books:
        callee, keyword = book.remedy.params["callee"], book.remedy.params["keyword"]
        for src in sources:
            module = src.imported_from(callee)
            if module is None or module.split(".")[0] not in ctx.library_packages:
                continue  # a callee of the user's own, or one the library does not define, is no playbook's
            for call in src.calls_named(callee):
                if isinstance(call.func, ast.Name) and not any(k.arg in (keyword, None) for k in call.keywords):
                    sites.append((book, src, call, f"{module}:{callee}"))
    learn_signatures(ctx, [t for *_, t in sites])  # what the signature detector already learnt is not asked again
    faults: list[Fault] = []
    for book, src, call, target in sites:
        sig = ctx.memo.get(f"signature:{target}")
        fault = predicted_fault(book, src, call, sig) if isinstance(sig, src_tools.Signature) else None
        if fault is not None and all(f.fingerprint != fault.fingerprint for f in faults):
            faults.append(fault)
    return faults


def predicted_fault(book: Playbook, src: Source, call: ast.Call, sig: src_tools.Signature) -> Fault | None:
    keyword, value = book.remedy.params["keyword"], book.remedy.params["value"]
    param = sig.param(keyword)
    if param is None or not param.has_default or param.default_src is None:
        return None  # no default to leave the keyword to, or one the record cannot show
    if not (sig.exact or sig.required_exact) or param.default_src.strip() == value.strip():
        return None  # the installed default already is the remedy's value: nothing to predict
    callee = book.remedy.params["callee"]  # the name the call was found by
    func = src.enclosing_function(call.lineno)
    frame = FrameRef(src.path, call.lineno, func.name if func else "<module>", src.line(call.lineno).strip())
    message = (f"{callee}() leaves {keyword} to the installed default {param.default_src} "
               f"({sig.path}:{sig.lineno}): {first_sentence(book.rationale)}")
    return Fault("scan", "PredictedFault", message, (frame,), fingerprint=f"scan:playbook:{book.id}:{src.path}",
                 log_excerpt=f"predicted by the scan from playbook {book.id}: {' '.join(book.rationale.split())}",
                 finding=Finding("playbook", callee=callee, name=book.id, detail=keyword))


def first_sentence(text: str) -> str:
    words = " ".join(text.split())
    return words.split(". ", 1)[0].rstrip(".") + "."
