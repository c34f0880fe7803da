"""The ``guard_call`` playbook remedy: a call that works on some platforms only, guarded where it is made.

The call (``params["call"]``, e.g. ``torch.cuda.mem_get_info``) is looked for in the statement of each fixable
frame of the fault, innermost first; where that statement only calls a helper of the fixable code that makes it
(one step of the call graph, agent/repair/callgraph.py), in the helper, whichever of its statements make it.
Each such statement becomes

    <setup>
    if <guard>:
        <statement>
    else:  # <comment>
        <statement, the call replaced by (<fallback>)>

(a call in an ``if``/``while`` header, or sharing its line with another statement, gets a conditional
expression instead). A call already under an ``if <guard>`` is left alone. Where the scan found a helper of ours
that answers nothing (zero) for the query on this host (agent/repair/scan_zero_answers.py: the finding names the
helper, not the call), the helper's call is the one guarded, where our code makes it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from agent.repair.callgraph import reached
from agent.repair.context import candidate, evidence_line, fixable_frames, read_source
from agent.repair.edits import Source, insert_before_statement, replace_span, statement_holding
from agent.repair.types import Candidate, Check, Fault, RepairContext


def header(stmt: ast.stmt) -> list[ast.AST]:
    """What a statement evaluates itself: a compound statement's test or iterable, not its body."""
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.iter]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [item.context_expr for item in stmt.items]
    if hasattr(stmt, "body"):
        return []
    return [stmt]


def unguarded_calls(src: Source, nodes: list[ast.AST], dotted: str, guard: str,
                    answering: str | None = None) -> list[ast.Call]:
    guarded: set[int] = set()
    for node in ast.walk(src.tree):
        if isinstance(node, ast.If | ast.IfExp) and guard in ast.unparse(node.test):
            guarded |= {id(n) for n in ast.walk(node)}
    return [n for node in nodes for n in ast.walk(node) if isinstance(n, ast.Call) and id(n) not in guarded
            and (makes_call(n, dotted) or (answering is not None and ast.unparse(n.func) == answering))]


def makes_call(call: ast.Call, dotted: str) -> bool:
    """``dotted`` as written, or its method on a local that holds the module (``mod = torch.get_device_module(acc)``;
    ``mod.mem_get_info()``): the playbook's signature already proved from the traceback where the call landed."""
    if ast.unparse(call.func) == dotted:
        return True
    root, _, attr = dotted.partition(".")
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == dotted.rsplit(".", 1)[-1]
            and isinstance(func.value, ast.Name) and func.value.id != root and bool(attr))


def sites(
    ctx: RepairContext, fault: Fault, dotted: str, guard: str, answering: str | None = None
) -> Iterator[tuple[Source, list[ast.stmt], list[str]]]:
    """(file, statements making the call, evidence) for the innermost fixable frames first."""
    for frame in fixable_frames(ctx, fault):
        src = read_source(ctx, frame.file)
        stmt = statement_holding(src.tree, frame.line) if src else None
        if src is None or stmt is None:
            continue
        seen = [evidence_line(frame.file, frame.line, src.line(frame.line))]
        if unguarded_calls(src, header(stmt), dotted, guard, answering):
            yield src, [stmt], seen
            continue
        for call, helper_src, helper in (found for node in header(stmt) for found in reached(ctx, src, node)):
            statements = [s for s in ast.walk(helper) if isinstance(s, ast.stmt) and s is not helper
                          and unguarded_calls(helper_src, header(s), dotted, guard)]
            if statements:
                seen.append(evidence_line(frame.file, call.lineno, f"calls {helper.name}() of {helper_src.path}"))
                seen += [evidence_line(helper_src.path, s.lineno, helper_src.line(s.lineno)) for s in statements]
                yield helper_src, statements, seen


def guarded_text(src: Source, stmt: ast.stmt, dotted: str, params: dict[str, str], answering: str | None = None) -> str:
    """The file's text with ``stmt`` guarded (see the module's docstring)."""
    guard, fallback = params["guard"], params["fallback"]
    calls = unguarded_calls(src, header(stmt), dotted, guard, answering)
    indent = src.indent_of(stmt.lineno)
    simple = not hasattr(stmt, "body") and stmt.col_offset == len(indent.encode()) and (
        src.line(stmt.end_lineno or stmt.lineno)[stmt.end_col_offset or 0 :].strip() in ("", "\\"))
    if not simple:  # a conditional expression in place, the setup before the statement
        text = src.text
        for call in sorted(calls, key=src.start, reverse=True):
            text = replace_span(text, src.start(call), src.end(call),
                                f"({src.segment(call)} if {guard} else ({fallback}))")
        return insert_before_statement(Source(src.path, text), stmt.lineno, [params["setup"]])
    start, end = src.pos(stmt.lineno, 0), src.end(stmt)
    block = src.text[start:end]
    other = block
    for call in sorted(calls, key=src.start, reverse=True):
        other = other[: src.start(call) - start] + f"({fallback})" + other[src.end(call) - start :]

    def deeper(text: str) -> str:
        return "\n".join(("    " + line) if line.strip() else line for line in text.split("\n"))

    comment = f"  # {params['comment']}" if params.get("comment") else ""
    new = (f"{indent}{params['setup']}\n{indent}if {guard}:\n{deeper(block)}\n"
           f"{indent}else:{comment}\n{deeper(other)}")
    return replace_span(src.text, start, end, new)


def guard_call(ctx: RepairContext, fault: Fault, params: dict[str, str], *, origin: str, rationale: str,
               checks: list[Check]) -> Candidate | None:
    dotted = params["call"]
    answering = fault.finding.callee if fault.finding and fault.finding.kind == "zero_answer" else None
    for src, statements, seen in sites(ctx, fault, dotted, params["guard"], answering):
        text = src.text
        for stmt in sorted(statements, key=lambda s: s.lineno, reverse=True):  # bottom up: offsets stay valid
            current = Source(src.path, text)
            now = statement_holding(current.tree, stmt.lineno)
            if now is None:
                continue
            text = guarded_text(current, now, dotted, params, answering)
        if text != src.text:
            return candidate(ctx, {src.path: text}, origin=origin, rationale=rationale, evidence=seen,
                             extra_checks=checks)
    return None
