"""Derived repairs where the line that fails is not the line to fix.

- a value that changed shape: follow the failing line's names back through their assignments to a library
  call whose result we index; if the library's own callers that pass the same keywords never index it, the
  call now returns one value where it returned a list: drop our index.
- a protocol step that became mandatory: the error names the call that must follow ours; copy how the
  library's own code makes that call after ours, mapped onto our receiver and arguments.
"""

from __future__ import annotations

import ast
import re

from agent.repair.context import (
    candidate,
    evidence_line,
    fixable_frames,
    library_call_node,
    library_call_sites,
    read_source,
)
from agent.repair.edits import Source, assignment_before, callee_name, replace_span
from agent.repair.types import Candidate, Fault, RepairContext

SHAPE_DRIFT = "returns a single value in the installed library, not a list"  # how the scan words it for people
SHAPE_SYMPTOMS = (  # what Python says when a run indexes a single value as if it were a list
    "Boolean value of Tensor with more than one value is ambiguous",
    "The truth value of an array with more than one element is ambiguous",
    "object is not subscriptable",
    "too many values to unpack",
    "not enough values to unpack",
)
MUST_CALL = re.compile(r"(?P<next>\w+)\(\) must be called after (?P<prev>\w+)\(\)(?P<cond> returns None)?")


def changed_return_shape(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    seen = fault.finding.kind == "return_shape" if fault.finding else any(s in fault.message for s in SHAPE_SYMPTOMS)
    if not seen:
        return []
    for frame in fixable_frames(ctx, fault):
        src = read_source(ctx, frame.file)
        stmt = src.statement_at(frame.line) if src else None
        func = src.enclosing_function(frame.line) if src else None
        if src is None or func is None:
            continue
        if stmt is None:  # an `if`/`while` test: its line holds the names
            stmt = next((n for n in ast.walk(func) if isinstance(n, ast.If | ast.While) and n.lineno == frame.line),
                        None)
        if stmt is None:
            continue
        names = [n.id for n in ast.walk(getattr(stmt, "test", stmt)) if isinstance(n, ast.Name)]
        for name in dict.fromkeys(names):
            found = indexed_call_result(src, func, name, frame.line + 1)  # the line itself may index
            if found is None:
                continue
            index_assign, subscript, call = found
            verdict = library_indexes_result(ctx, src, call)
            if verdict is None:
                continue
            evidence = [evidence_line(frame.file, frame.line, src.line(frame.line)),
                        evidence_line(frame.file, index_assign.lineno, src.line(index_assign.lineno)),
                        *verdict]
            text = replace_span(src.text, src.start(subscript), src.end(subscript), src.segment(subscript.value))
            method = callee_name(call)
            why = (f"{method}() with {', '.join(k.arg for k in call.keywords if k.arg) or 'these arguments'} now "
                   f"returns a single reply, not a list: the library's own callers use it whole, so "
                   f"`{src.segment(subscript)}` took the first element of that reply (the failing line "
                   f"{frame.line} only showed the symptom)")
            return [candidate(ctx, {frame.file: text}, origin="derived:changed_return_shape", rationale=why,
                              evidence=evidence)]
    return []


def indexed_call_result(
    src: Source, func: ast.AST, name: str, line: int
) -> tuple[ast.Assign, ast.Subscript, ast.Call] | None:
    """``name = v[0]`` with ``v = <call>(...)`` before ``line`` in ``func``, if that is where name comes from."""
    assign = assignment_before(func, name, line)
    if assign is None or not isinstance(assign.value, ast.Subscript):
        return None
    subscript = assign.value
    if not (isinstance(subscript.slice, ast.Constant) and subscript.slice.value == 0):
        return None
    base = subscript.value
    if isinstance(base, ast.Call):
        return assign, subscript, base
    if isinstance(base, ast.Name):
        source = assignment_before(func, base.id, assign.lineno)
        if source is not None and isinstance(source.value, ast.Call):
            return assign, subscript, source.value
    return None


def library_indexes_result(ctx: RepairContext, src: Source, call: ast.Call) -> list[str] | None:
    """Evidence that library callers passing our keywords use the result whole, or None if unclear."""
    method = callee_name(call)
    ours = {k.arg for k in call.keywords if k.arg}
    if not method or not ours:
        return None
    whole, indexed = 0, 0
    evidence: list[str] = []
    for site in library_call_sites(ctx, method):
        if not ours & {k for k, _ in site.keywords}:
            continue
        found = library_call_node(ctx, site.path, site.lineno, method)
        if found is None:
            continue
        lib, lib_call = found
        if result_is_indexed(lib, lib_call):
            indexed += 1
        else:
            whole += 1
            if len(evidence) < 3:
                evidence.append(evidence_line(site.path, site.lineno, site.source_line))
    if whole and not indexed:
        return evidence
    return None


def result_is_indexed(lib: Source, call: ast.Call) -> bool:
    for node in ast.walk(lib.tree):
        if isinstance(node, ast.Subscript) and node.value is call:
            return True
        if isinstance(node, ast.Assign) and node.value is call and isinstance(node.targets[0], ast.Name):
            func = lib.enclosing_function(call.lineno)
            target = node.targets[0].id
            return func is not None and any(
                isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == target
                for n in ast.walk(func)
            )
    return False


def mandatory_protocol_step(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = MUST_CALL.search(fault.message)
    if not match:
        return []
    nxt, prev, only_if_none = match["next"], match["prev"], bool(match["cond"])
    for frame in fixable_frames(ctx, fault):
        src = read_source(ctx, frame.file)
        call = src.call_at(frame.line, prev) if src else None
        stmt = src.statement_at(frame.line) if src else None
        if src is None or call is None or not isinstance(stmt, ast.Expr | ast.Assign):
            continue
        if not isinstance(call.func, ast.Attribute):
            continue
        receiver = src.segment(call.func.value)
        pattern = library_follow_up(ctx, prev, nxt)
        if pattern is None:
            continue
        lib_receiver, arg_exprs, evidence = pattern
        mapping = {lib_receiver: receiver}
        if call.args:
            mapping["<prev-arg-0>"] = src.segment(call.args[0])
        args = [translate(e, mapping, src) for e in arg_exprs]
        if any(a is None for a in args):
            continue
        indent = src.indent_of(stmt.lineno)
        result = src.segment(stmt.targets[0]) if isinstance(stmt, ast.Assign) else "model_output"
        lines = [f"{indent}{result} = {src.segment(call)}"]
        body = f"{receiver}.{nxt}({', '.join(a for a in args if a)})"
        if only_if_none:
            lines += [f"{indent}if {result} is None:", f"{indent}    {body}"]
        else:
            lines.append(f"{indent}{body}")
        start = src.pos(stmt.lineno, 0)
        text = replace_span(src.text, start, src.end(stmt), "\n".join(lines))
        why = (f"the installed library requires {nxt}() after {prev}()"
               f"{' returns None' if only_if_none else ''}; the call is made the way the library's own "
               f"engine makes it")
        evidence.insert(0, evidence_line(frame.file, frame.line, src.line(frame.line)))
        return [candidate(ctx, {frame.file: text}, origin="derived:protocol_step", rationale=why, evidence=evidence)]
    return []


def library_follow_up(ctx: RepairContext, prev: str, nxt: str) -> tuple[str, list[str], list[str]] | None:
    """How library code calls ``nxt`` after ``prev``: (receiver, argument expressions, evidence)."""
    for site in library_call_sites(ctx, nxt):
        found = library_call_node(ctx, site.path, site.lineno, nxt)
        if found is None:
            continue
        lib, nxt_call = found
        func = lib.enclosing_function(nxt_call.lineno)
        if func is None or not isinstance(nxt_call.func, ast.Attribute):
            continue
        prev_calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and callee_name(n) == prev
                      and n.lineno < nxt_call.lineno and isinstance(n.func, ast.Attribute)]
        if not prev_calls:
            continue
        prev_call = prev_calls[-1]
        receiver = ast.unparse(nxt_call.func.value)
        if ast.unparse(prev_call.func.value) != receiver:  # type: ignore[attr-defined]
            continue
        prev_arg = ast.unparse(prev_call.args[0]) if prev_call.args else None
        exprs: list[str] = []
        evidence = [evidence_line(site.path, prev_call.lineno, lib.line(prev_call.lineno)),
                    evidence_line(site.path, nxt_call.lineno, lib.line(nxt_call.lineno))]
        for arg in nxt_call.args:
            expr = arg
            if isinstance(arg, ast.Name):
                assigned = assignment_before(func, arg.id, nxt_call.lineno)
                if assigned is not None:
                    evidence.append(evidence_line(site.path, assigned.lineno, lib.line(assigned.lineno)))
                    expr = assigned.value
            text = ast.unparse(expr)
            if prev_arg:
                text = re.sub(rf"\b{re.escape(prev_arg)}\b", "<prev-arg-0>", text)
            exprs.append(text)
        return receiver, exprs, evidence
    return None


def translate(expr: str, mapping: dict[str, str], src: Source) -> str | None:
    """Rewrite a library expression in our names; None if it needs something we do not have."""
    for lib_name, ours in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(lib_name, ours)
    attrs = re.findall(r"\bself\.(\w+)", expr)
    if attrs and not all(re.search(rf"\bself\.{a}\s*=", src.text) for a in attrs):
        return None
    return expr
