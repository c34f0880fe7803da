"""Derived repairs for calls that no longer fit the installed signature.

- unexpected keyword argument: read the installed signature; rename to a close parameter, else drop it.
- missing required argument / required pydantic or dataclass field: copy what the library's own call sites
  pass, with the library's names mapped onto ours through the arguments both calls share (through one helper's
  tuple return when the library unpacks one: agent/repair/derived_values.py); failing that, a literal the
  library itself uses as that parameter's default.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re

from agent.repair import derived_values
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
    insert_before_statement,
    local_names,
    remove_keyword,
    rename_keyword,
)
from agent.repair.types import Candidate, Check, Fault, RepairContext
from tools import pysyntax
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
    if fault.finding is not None:  # the scan says what it saw; only a run's traceback needs reading
        if fault.finding.kind != "unexpected_kwarg":
            return []
        name, keyword = fault.finding.callee, fault.finding.name
    elif match := UNEXPECTED.search(fault.message):
        name, keyword = callee_short(match["callee"]), match["kw"]
    else:
        return []
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
        if sig.rejects_keyword(keyword) is not True:
            continue  # not proven on the outermost callable (a wrapper may take it): propose nothing
        passed = {k.arg for k in call.keywords}
        free = [p.name for p in sig.params if p.kind in ("positional_or_keyword", "keyword_only")
                and p.name not in passed]
        evidence = [
            evidence_line(frame.file, call.lineno, src.line(call.lineno)),
            f"{sig.path}:{sig.lineno}: installed {name}({', '.join(p.name for p in sig.params)})",
            *(f"{sig.path}:{sig.lineno}: called through {layer}" for layer in sig.layers),
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
    match = MISSING.search(fault.message) if fault.finding is None else None
    pyd = PYDANTIC_MISSING.search(fault.message) if fault.finding is None else None
    if fault.finding is not None:
        if fault.finding.kind != "missing_argument":
            return []
        name, missing = fault.finding.callee, [fault.finding.name]
    elif match:
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
        before: list[str] = []  # what a value needs computed first (the library's own unpacking of a helper)
        for param in missing:
            value = value_from_call_sites(ctx, src, call, name, param, evidence, before)
            if value is None:
                value = library_default_literal(ctx, src, name, param, evidence)
            if value is None:
                break
            current = Source(src.path, text)
            text = add_keyword(current, current.call_at(frame.line, name) or call, param, value)
        else:
            if before:
                text = insert_before_statement(Source(src.path, text), call.lineno, list(dict.fromkeys(before)))
            target = resolve_callee(ctx, src, name) or name
            why = (f"{name}() now requires {', '.join(missing)}; passing what vLLM's own code passes "
                   f"({'; '.join(e.split(': ', 1)[-1] for e in evidence[1:])[:300]})")
            return [candidate(ctx, {frame.file: text}, origin="derived:missing_argument", rationale=why,
                              evidence=evidence, extra_checks=[Check("signature_has", target, p) for p in missing])]
    return []


def value_from_call_sites(
    ctx: RepairContext, src: Source, call: ast.Call, name: str, param: str, evidence: list[str],
    before: list[str] | None = None,
) -> str | None:
    """An expression for ``param`` taken from a library call site and rewritten in our call's names.

    Where the library computes it through a helper (``a, b = helper(...)``), the statements our code must run
    first are added to ``before`` (none are proposed when it is None)."""
    ours = {k.arg: src.segment(k.value) for k in call.keywords if k.arg}
    func = src.enclosing_function(call.lineno)
    ours_local = local_names(func) if func else set()
    in_scope = src.module_names() | ours_local | set(dir(builtins))
    for site in library_call_sites(ctx, name):
        passed = dict(site.keywords)
        if param not in passed:
            continue
        found = library_call_node(ctx, site.path, site.lineno, name)
        if found is None:
            continue
        lib, lib_call = found
        lib_kw = next(k for k in lib_call.keywords if k.arg == param)
        lib_func = lib.enclosing_function(lib_call.lineno)
        # library name -> our expression, through the arguments both calls pass by the same keyword
        mapping = {
            k.value.id: ours[k.arg] for k in lib_call.keywords
            if k.arg in ours and isinstance(k.value, ast.Name)
        }
        for option in derived_values.library_options(ctx, lib, lib_func, lib_call, lib_kw.value):
            if option.setup and (before is None or option.binds & (ours_local | src.module_names())):
                continue  # no room for the helper's call here, or it would overwrite a name of ours
            # the library's `self` is not ours: only names that map onto ours, or that we have, may remain
            if not all(n in mapping or (n in in_scope and n != "self") for n in option.needs()):
                continue
            evidence.extend(option.evidence)
            evidence.append(evidence_line(site.path, site.lineno, f"{param}={ast.unparse(lib_kw.value)}"))
            if before is not None:
                before += [f"from {module} import {orig}" + (f" as {alias}" if alias != orig else "")
                           for module, orig, alias in option.imports if src.imported_from(alias) != module]
                before += [ast.unparse(MapNames(mapping).visit(copy.deepcopy(stmt))) for stmt in option.setup]
            return ast.unparse(MapNames(mapping).visit(copy.deepcopy(option.value)))
    return None


class MapNames(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.mapping:
            return pysyntax.parse_expression(self.mapping[node.id])
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
