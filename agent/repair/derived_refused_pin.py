"""The library refuses a value our code pins, where it chooses the value itself when it is left unset.

vLLM 0.31's CPU attention takes KV blocks in multiples of 32 and refuses "No common block size for 16 (CPU_ATTN:
[MultipleOf(32)])"; speculators 0.3.0 passes ``CacheConfig(block_size=VLLM_BLOCK_SIZE)`` (16), while vLLM's CPU
platform picks a size of its own for a config that leaves it unset. That the refused value is ours is read twice
over: the refusal's own f-string formats a variable whose name holds our keyword (``kv_manager_block_size`` holds
``block_size``), and the message prints our value there. The keyword is dropped only where the library's parameter
defaults to None (the library decides); a concrete default would be one more pin, and nothing is proposed.
Where our code passes the same pinned value under the same keyword to a callee that needs it given (speculators
0.4 hands ``block_size=VLLM_BLOCK_SIZE`` to vLLM's ``Scheduler`` too), that pin would now disagree with the size the
library chose: it takes what the library's own callers of that callee pass there, rewritten in our names (as a
missing argument's value is, agent/repair/derived_calls.py), in the same change; when no caller shows it, the drop
is proposed alone.
"""

from __future__ import annotations

import ast
import re

from agent.repair.context import (
    candidate,
    evidence_line,
    fixable_frames,
    library_refusal,
    read_source,
    resolve_callee,
)
from agent.repair.derived_calls import value_from_call_sites
from agent.repair.edits import Source, add_keyword, callee_name, insert_before_statement, remove_keyword
from agent.repair.types import Candidate, Fault, RepairContext
from tools import source as src_tools
from tools.errors import MedicError


def refused_pin(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    refusal = library_refusal(ctx, fault)
    raised = refused_values(refusal.stmt, fault.message) if refusal else {}
    if refusal is None or not raised:
        return []
    for path in our_files(ctx, fault):
        src = read_source(ctx, path)
        if src is None:
            continue
        for call, keyword, value in pinned_keywords(src):
            variable = next((v for v, shown in raised.items() if shown == value and holds(v, keyword)), None)
            target = resolve_callee(ctx, src, callee_name(call) or "") if variable else None
            if target is None or not library_decides(ctx, target, keyword):
                continue
            why = (f"the installed library refuses {keyword}={value} ({refusal.where}: it prints {variable}), and "
                   f"{target} leaves {keyword} to the library when it is not given (its default is None): our pin "
                   f"dropped")
            evidence = [refusal.evidence, evidence_line(path, call.lineno, src.line(call.lineno)),
                        f"{target}: {keyword} defaults to None"]
            text, followed = follow_the_choice(ctx, Source(path, remove_keyword(src, call, keyword)), keyword,
                                               value, evidence)
            why += f"; {', '.join(followed)} given what the library's own callers pass there" if followed else ""
            return [candidate(ctx, {path: text}, origin="derived:refused_pin", rationale=why, evidence=evidence)]
    return []


def follow_the_choice(ctx: RepairContext, src: Source, keyword: str, value: str,
                      evidence: list[str]) -> tuple[str, list[str]]:
    """``src``'s text with every other call that pins ``keyword`` to ``value`` given what the library's callers of
    that callee pass for it instead (the statements that value needs first, before the call), and those callees.
    Bottom up, so an edit never moves a call still to be read."""
    pins = sorted(((call.lineno, callee_name(call) or "") for call, kw, shown in pinned_keywords(src)
                   if kw == keyword and shown == value), reverse=True)
    followed: list[str] = []
    for lineno, name in pins:
        call = src.call_at(lineno, name) if name else None
        if call is None:
            continue
        # derived from our call without the pin: what we pass there must not stand in for the library's value
        dropped = Source(src.path, remove_keyword(src, call, keyword))
        unpinned = dropped.call_at(lineno, name)
        before: list[str] = []
        derived = value_from_call_sites(ctx, dropped, unpinned, name, keyword, evidence, before) if unpinned else None
        if unpinned is None or derived is None:
            continue  # no caller of the library shows it: this pin is left as it is
        text = add_keyword(dropped, unpinned, keyword, derived)
        if before:
            text = insert_before_statement(Source(src.path, text), lineno, list(dict.fromkeys(before)))
        src = Source(src.path, text)
        followed.append(name)
    return src.text, followed[::-1]


def refused_values(stmt: ast.Raise, message: str) -> dict[str, str]:
    """Each variable the library's raising f-string formats -> the text the message shows for it."""
    if stmt.exc is None:
        return {}
    template = next((n for n in ast.walk(stmt.exc) if isinstance(n, ast.JoinedStr)), None)
    if template is None:
        return {}
    whole = isinstance(stmt.exc, ast.Call) and bool(stmt.exc.args) and stmt.exc.args[0] is template
    pattern, names = "", list[str]()
    for at, part in enumerate(template.values):
        if isinstance(part, ast.Constant):
            pattern += re.escape(str(part.value))
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and (
                whole or at < len(template.values) - 1):  # a last value of a longer message has no end to read to
            pattern += f"(?P<v{len(names)}>.+?)"
            names.append(part.value.id)
        else:
            pattern += ".+?"
    shown = re.match(pattern + ("$" if whole else ""), message, re.S)
    return {name: shown[f"v{i}"] for i, name in enumerate(names)} if shown else {}


def holds(variable: str, keyword: str) -> bool:
    """``kv_manager_block_size`` holds ``block_size``: the keyword's words, whole, inside the variable's."""
    return re.search(rf"(?:^|_){re.escape(keyword)}(?:_|$)", variable) is not None


def our_files(ctx: RepairContext, fault: Fault) -> list[str]:
    """Where our pins may be: the fixable files of the traceback, then those the scan read this session."""
    return list(dict.fromkeys([*(f.file for f in fixable_frames(ctx, fault)), *ctx.memo.get("files", ())]))


def pinned_keywords(src: Source) -> list[tuple[ast.Call, str, str]]:
    """(call, keyword, value as text) for each keyword our code passes a literal, or a module constant, to. A
    constant chosen between literals by the host (speculators 0.4: ``128 if is_npu_available() else 16``) pins
    either: one entry for each."""
    constants = {t.id: n.value for n in src.tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
    found = []
    for call in (n for n in ast.walk(src.tree) if isinstance(n, ast.Call)):
        for kw in call.keywords:
            value = constants.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
            for choice in (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,):
                if kw.arg and isinstance(choice, ast.Constant) and isinstance(choice.value, int | float | str):
                    found.append((call, kw.arg, str(choice.value)))
    return found


def library_decides(ctx: RepairContext, target: str, keyword: str) -> bool:
    try:
        params = src_tools.signature(ctx.host, ctx.python, target).params
    except MedicError:
        return False
    return any(p.name == keyword and p.has_default and p.default_src == "None" for p in params)
