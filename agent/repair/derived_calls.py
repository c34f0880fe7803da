"""Derived repairs for calls that no longer fit the installed signature.

- unexpected keyword argument: read the installed signature; rename to a close parameter, else drop it.
- missing required argument / required pydantic or dataclass field: copy what the library's own call sites
  pass, with the library's names mapped onto ours through the arguments both calls share; failing that, a
  literal the library itself uses as that parameter's default.
"""

from __future__ import annotations

import ast
import re

from agent.repair.context import (
    candidate,
    close_name,
    evidence_line,
    fixable_frames,
    library_call_node,
    library_call_sites,
    read_source,
    resolve_callee,
)
from agent.repair.edits import (
    Source,
    add_keyword,
    assignment_before,
    local_names,
    remove_keyword,
    rename_keyword,
)
from agent.repair.types import Candidate, Check, Fault, RepairContext
from tools import source as src_tools
from tools.errors import MedicError

UNEXPECTED = re.compile(r"(?P<callee>[\w.]+)\(\) got an unexpected keyword argument '(?P<kw>\w+)'")
MISSING = re.compile(
    r"(?P<callee>[\w.]+)\(\) missing \d+ required (?:positional|keyword-only) arguments?: (?P<names>.+)"
)
PYDANTIC_MISSING = re.compile(r"validation errors? for (?P<callee>\w+)\n(?P<field>\w+)\n\s+Field required")


def callee_short(text: str) -> str:
    """``Scheduler.__init__`` -> ``Scheduler``; ``mod.func`` -> ``func``."""
    parts = [p for p in text.split(".") if p != "__init__"]
    return parts[-1]


def unexpected_keyword(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = UNEXPECTED.search(fault.message)
    if not match:
        return []
    name, keyword = callee_short(match["callee"]), match["kw"]
    for frame in fixable_frames(ctx, fault):
        src = read_source(ctx, frame.file)
        call = src.call_at(frame.line, name) if src else None
        if src is None or call is None:
            continue
        target = resolve_callee(ctx, src, name)
        if target is None:
            continue
        try:
            sig = src_tools.signature(ctx.host, ctx.python, target)
        except MedicError:
            continue
        if any(p.kind == "var_keyword" for p in sig.params):
            continue  # it takes **kwargs: the keyword goes deeper; not a signature drift we can see here
        passed = {k.arg for k in call.keywords}
        free = [p.name for p in sig.params if p.kind in ("positional_or_keyword", "keyword_only")
                and p.name not in passed]
        evidence = [
            evidence_line(frame.file, call.lineno, src.line(call.lineno)),
            f"{sig.path}:{sig.lineno}: installed {name}({', '.join(p.name for p in sig.params)})",
        ]
        renamed = close_name(keyword, free)
        if renamed:
            text = rename_keyword(src, call, keyword, renamed)
            why = f"{name}() no longer takes {keyword}=; the installed signature has {renamed}= instead"
            kind = "rename"
        else:
            text = remove_keyword(src, call, keyword)
            why = f"{name}() no longer takes {keyword}= (installed signature: {', '.join(p.name for p in sig.params)})"
            kind = "drop"
        checks = [Check("signature_has", target, renamed)] if renamed else []
        return [candidate(ctx, {frame.file: text}, origin=f"derived:unexpected_kwarg:{kind}",
                          rationale=why, evidence=evidence, extra_checks=checks)]
    return []


def missing_argument(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = MISSING.search(fault.message)
    pyd = PYDANTIC_MISSING.search(fault.message)
    if match:
        name, missing = callee_short(match["callee"]), re.findall(r"'(\w+)'", match["names"])
    elif pyd:
        name, missing = pyd["callee"], [pyd["field"]]
    else:
        return []
    for frame in fixable_frames(ctx, fault):
        src = read_source(ctx, frame.file)
        call = src.call_at(frame.line, name) if src else None
        if src is None or call is None:
            continue
        text, evidence = src.text, [evidence_line(frame.file, call.lineno, src.line(call.lineno))]
        for param in missing:
            value = value_from_call_sites(ctx, src, call, name, param, evidence)
            if value is None:
                value = library_default_literal(ctx, src, name, param, evidence)
            if value is None:
                break
            current = Source(src.path, text)
            text = add_keyword(current, current.call_at(frame.line, name) or call, param, value)
        else:
            target = resolve_callee(ctx, src, name) or name
            why = (f"{name}() now requires {', '.join(missing)}; passing what vLLM's own code passes "
                   f"({'; '.join(e.split(': ', 1)[-1] for e in evidence[1:])[:300]})")
            return [candidate(ctx, {frame.file: text}, origin="derived:missing_argument", rationale=why,
                              evidence=evidence, extra_checks=[Check("signature_has", target, p) for p in missing])]
    return []


def value_from_call_sites(
    ctx: RepairContext, src: Source, call: ast.Call, name: str, param: str, evidence: list[str]
) -> str | None:
    """An expression for ``param`` taken from a library call site and rewritten in our call's names."""
    ours = {k.arg: src.segment(k.value) for k in call.keywords if k.arg}
    func = src.enclosing_function(call.lineno)
    in_scope = src.module_names() | (local_names(func) if func else set()) | set(dir(__builtins__))
    for site in library_call_sites(ctx, name):
        passed = dict(site.keywords)
        if param not in passed:
            continue
        found = library_call_node(ctx, site.path, site.lineno, name)
        if found is None:
            continue
        lib, lib_call = found
        lib_kw = next(k for k in lib_call.keywords if k.arg == param)
        expr: ast.expr = lib_kw.value
        lib_func = lib.enclosing_function(lib_call.lineno)
        if isinstance(expr, ast.Name) and lib_func is not None:  # a local: take what it was computed from
            assigned = assignment_before(lib_func, expr.id, lib_call.lineno)
            if assigned is not None:
                evidence.append(evidence_line(site.path, assigned.lineno, ast.unparse(assigned)))
                expr = assigned.value
        # library name -> our expression, through the arguments both calls pass by the same keyword
        mapping = {
            k.value.id: ours[k.arg] for k in lib_call.keywords
            if k.arg in ours and isinstance(k.value, ast.Name)
        }
        rewritten = MapNames(mapping).visit(ast.parse(ast.unparse(expr), mode="eval"))
        free = {n.id for n in ast.walk(rewritten) if isinstance(n, ast.Name)} - set(mapping.values())
        if all(n in in_scope or n in {"self"} for n in free):
            evidence.append(evidence_line(site.path, site.lineno, f"{param}={ast.unparse(lib_kw.value)}"))
            return ast.unparse(rewritten.body)
    return None


class MapNames(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.mapping:
            return ast.parse(self.mapping[node.id], mode="eval").body
        return node


LITERAL_DEFAULT = r"""(?:\[["']{p}["']\]\s*=\s*|\b{p}\s*=\s*)(True|False|None|-?\d+(?:\.\d+)?|["'][^"']*["'])\s*$"""


def library_default_literal(
    ctx: RepairContext, src: Source, name: str, param: str, evidence: list[str]
) -> str | None:
    """A literal the library's own definition of ``name`` fills ``param`` with (e.g. a default factory)."""
    target = resolve_callee(ctx, src, name)
    if target is None:
        return None
    try:
        symbol = src_tools.find_symbol(ctx.host, ctx.python, target)
    except MedicError:
        return None
    pattern = re.compile(LITERAL_DEFAULT.format(p=re.escape(param)))
    for offset, line in enumerate(symbol.source.splitlines()):
        hit = pattern.search(line)
        if hit:
            evidence.append(evidence_line(symbol.path, symbol.start + offset, line))
            return hit.group(1)
    return None
