"""Derived repairs for names that moved or were renamed in the library.

- missing attribute or method: the class's installed members; the one whose name shares the most word stems
  and whose signature takes the arguments our call passes is the rename.
- moved import: where the library defines the name now. A name no module of the installed library defines is
  a caller written for another release of it: nothing is proposed, and the stop says so with the caller's own
  declared requirement on the library.
"""

from __future__ import annotations

import ast
import re

from agent.repair.context import (
    candidate,
    evidence_line,
    fixable_frames,
    library_definitions,
    read_source,
    rename_score,
)
from agent.repair.derived_platform import distribution_of
from agent.repair.edits import rename_attribute, replace_span
from agent.repair.limits import installed_version
from agent.repair.types import Candidate, Check, Fault, NotProven, RepairContext
from tools import source as src_tools
from tools.errors import MedicError
from tools.requirements import declared_ranges
from tools.site_dirs import package_of

NO_ATTRIBUTE = re.compile(r"'(?P<cls>\w+)' object has no attribute '(?P<attr>\w+)'")
CANNOT_IMPORT = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)'")
MIN_RENAME_SCORE = 0.6


def positional_arity(sig: src_tools.Signature | None) -> tuple[int, int] | None:
    """(required, maximum) positional arguments a method takes after ``self``; maximum -1 = unbounded."""
    if sig is None:
        return None
    params = [p for p in sig.params if p.kind in ("positional_only", "positional_or_keyword")]
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    unbounded = any(p.kind == "var_positional" for p in sig.params)
    return sum(not p.has_default for p in params), -1 if unbounded else len(params)


def renamed_member(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None:  # the scan says which class lacks which member: no message to read
        if fault.finding.kind != "grafted_member":
            return []
        cls, old = fault.finding.callee, fault.finding.name
    elif match := NO_ATTRIBUTE.search(fault.message):
        cls, old = match["cls"], match["attr"]
    else:
        return []
    for frame in fixable_frames(ctx, fault):
        src = read_source(ctx, frame.file)
        if src is None or f".{old}" not in src.line(frame.line):
            continue
        passed = [len(n.args) for n in ast.walk(src.tree) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute) and n.func.attr == old and n.lineno == frame.line]
        best: tuple[float, src_tools.Member] | None = None
        for place in library_definitions(ctx, cls)[:5]:
            try:
                members = src_tools.class_members(ctx.host, ctx.python, f"{place.module}:{place.name}")
            except MedicError:
                continue
            if any(m.name == old for m in members):
                continue  # this class still has it: not the one that raised
            for member in members:
                arity = positional_arity(member.signature)
                if passed and arity and not (arity[0] <= passed[0] and (arity[1] < 0 or passed[0] <= arity[1])):
                    continue
                score = rename_score(old, member.name)
                if score >= MIN_RENAME_SCORE and (best is None or score > best[0]):
                    best = (score, member)
        if best is None:
            continue
        member = best[1]
        text, count = rename_attribute(src, old, member.name)
        evidence = [
            evidence_line(frame.file, frame.line, src.line(frame.line)),
            f"{member.path}:{member.lineno}: {member.owner} defines {member.name}"
            f"({', '.join(p.name for p in member.signature.params) if member.signature else ''})",
        ]
        why = (f"{cls} has no {old} in the installed library; {member.owner}.{member.name} takes the same "
               f"arguments and is its rename ({count} use(s) renamed in {frame.file.rsplit('/', 1)[-1]})")
        return [candidate(ctx, {frame.file: text}, origin="derived:renamed_member", rationale=why,
                          evidence=evidence, extra_checks=[Check("member_exists", member.owner, member.name)])]
    return []


def moved_import(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = CANNOT_IMPORT.search(fault.message)
    if not match:
        return []
    name, old_module = match["name"], match["module"]
    package = old_module.split(".")[0]
    try:
        places = src_tools.locate_definitions(ctx.host, ctx.python, package, name)
    except MedicError:
        return []
    importers = [(frame, src, node) for frame in fixable_frames(ctx, fault)
                 if (src := read_source(ctx, frame.file)) is not None for node in src.tree.body
                 if isinstance(node, ast.ImportFrom) and node.module == old_module
                 and any(a.name == name for a in node.names)]
    if not places and importers:
        raise NotProven(never_defined(ctx, importers[0][0].file, importers[0][2].lineno, name, old_module))
    places = [p for p in places if p.module != old_module and "." not in p.name]
    if not places or not importers:
        return []
    new_module = sorted(places, key=lambda p: (p.module.count("."), p.module))[0].module
    frame, src, node = importers[0]
    keep = [a for a in node.names if a.name != name]
    indent = src.indent_of(node.lineno)
    moved = [a for a in node.names if a.name == name]
    lines = []
    if keep:
        lines.append(f"{indent}from {old_module} import {', '.join(ast.unparse(a) for a in keep)}")
    lines.append(f"{indent}from {new_module} import {', '.join(ast.unparse(a) for a in moved)}")
    text = replace_span(src.text, src.start(node), src.end(node), "\n".join(lines))
    evidence = [evidence_line(frame.file, node.lineno, src.line(node.lineno)),
                f"{places[0].path}:{places[0].start}: {name} is defined in {new_module}"]
    return [candidate(ctx, {frame.file: text}, origin="derived:moved_import",
                      rationale=f"{name} moved from {old_module} to {new_module}", evidence=evidence)]


def never_defined(ctx: RepairContext, importer: str, line: int, name: str, module: str) -> str:
    """The stop for a caller importing what the installed library has nowhere, with the caller's declared word."""
    library = module.split(".")[0]
    version = f" {installed}" if (installed := installed_version(ctx, library)) else ""
    said = ""
    caller = package_of(importer)
    if caller:
        try:
            declared = declared_ranges(ctx.host, ctx.python, caller)
            lines = declared.lines_naming(library, distribution_of(ctx, library) or library)
            said = f"; {declared.name} {declared.version} declares {', '.join(lines)}" if lines else ""
        except MedicError:
            pass
    return (f"{importer.rsplit('/', 1)[-1]}:{line} imports {name} from {module}, which no module of the installed "
            f"{library}{version} defines: the caller is written for a release of {library} that has it{said}; medic "
            f"writes no library code")
