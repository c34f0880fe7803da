"""Helpers every repair shares: read a fixable file, resolve a name to the library, build a Candidate."""

from __future__ import annotations

import ast
import contextlib
import difflib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from agent.repair.edits import Source
from agent.repair.types import Candidate, Check, Fault, FrameRef, RepairContext
from tools import source as src_tools
from tools.errors import MedicError
from tools.host import Host, read_text
from tools.patches import make_patch

T = TypeVar("T")


def read_source(ctx: RepairContext, path: str) -> Source | None:
    try:
        return Source(path, read_text(ctx.host, path))
    except MedicError:
        return None


def fixable_frames(ctx: RepairContext, fault: Fault) -> list[FrameRef]:
    """Frames medic may edit, innermost first: the root cause's own, then every other traceback's."""
    seen: set[tuple[str, int]] = set()
    frames: list[FrameRef] = []
    for frame in [*reversed(fault.frames), *reversed(fault.caller_frames)]:
        key = (frame.file, frame.line)
        if key not in seen and ctx.is_fixable(frame.file):
            seen.add(key)
            frames.append(frame)
    return frames


def module_of(ctx: RepairContext, path: str) -> str | None:
    """Dotted module name of a file under the target's site-packages (for an import check)."""
    for root in ctx.site_packages:
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix) and path.endswith(".py"):
            dotted = path[len(prefix) : -3].replace("/", ".")
            return dotted.removesuffix(".__init__")
    return None


def resolve_callee(ctx: RepairContext, src: Source, name: str) -> str | None:
    """``module:Name`` of a name the fixable file imports from a library (how we read its signature)."""
    module = src.imported_from(name)
    if module and module.split(".")[0] in ctx.api_packages(src.path):
        return f"{module}:{name}"
    found = library_definitions(ctx, name)
    return f"{found[0].module}:{found[0].name}" if found else None


# ctx.memo keys of library reads (where a module is, what a grep of a library package finds): the scan runs again
# after every patch, and each read is a probe process; a host step (an install) may change them (nodes/patching.py)
LIBRARY_READ = "read:"
ASKING = threading.Lock()


def asked_once(ctx: RepairContext, key: str, ask: Callable[[], T]) -> T:
    """``ask()``'s answer, or the MedicError it raised, kept in the session's memo under ``LIBRARY_READ + key``."""
    key = LIBRARY_READ + key
    with ASKING:  # the scan's rules run side by side (agent/repair/scan.py): one asks, the others wait for it
        lock = ctx.memo.setdefault(f"lock:{key}", threading.Lock())
    with lock:
        if key not in ctx.memo:
            try:
                ctx.memo[key] = (True, ask())
            except MedicError as err:
                ctx.memo[key] = (False, err)
    ok, answer = ctx.memo[key]
    if not ok:
        raise answer
    return answer


def module_file(ctx: RepairContext, module: str) -> str:
    """``src_tools.module_path`` in the target env, asked once a session (a patch changes a file, not where it is)."""
    return asked_once(ctx, f"module:{module}", lambda: src_tools.module_path(ctx.host, ctx.python, module))


def library_grep(ctx: RepairContext, package: str, pattern: str, *, glob: str = "*.py",
                 max_hits: int = 200) -> list[src_tools.GrepHit]:
    """``src_tools.grep`` over a library package's folder, asked once a session (medic patches the fixable
    packages, not the library; the signatures and members it reads are kept the same way)."""
    def ask() -> list[src_tools.GrepHit]:
        root = module_file(ctx, package).rsplit("/", 1)[0]
        return src_tools.grep(ctx.host, root, pattern, glob=glob, max_hits=max_hits, python=ctx.python)
    return list(asked_once(ctx, f"grep:{package}:{glob}:{max_hits}:{pattern}", ask))


def grep_sources(ctx: RepairContext, package: str, pattern: str) -> list[Source]:
    """The library package's source files with a line matching ``pattern``, read (none when it cannot be read)."""
    try:
        hits = library_grep(ctx, package, pattern)
    except MedicError:
        return []
    return [src for path in dict.fromkeys(hit.path for hit in hits) if (src := read_source(ctx, path)) is not None]


def across_libraries(ctx: RepairContext, lookup: Callable[..., list[T]], name: str) -> list[T]:
    """``lookup(host, python, package, name)`` over every library package (one the probe cannot read is skipped),
    asked once a session."""
    found: list[T] = []
    for package in ctx.library_packages:
        with contextlib.suppress(MedicError):
            found += asked_once(ctx, f"{lookup.__name__}:{package}:{name}",
                                lambda: lookup(ctx.host, ctx.python, package, name))  # noqa: B023 (called at once)
    return found


def library_call_sites(ctx: RepairContext, name: str) -> list[src_tools.CallSite]:
    """How the library packages themselves call ``name``: every call, not the first few — a repair counts them as
    evidence (vLLM 0.26 has 68 ``collective_rpc`` calls; the few that pass ``unique_reply_rank`` sort last)."""
    return across_libraries(ctx, every_call_site, name)


def every_call_site(host: Host, python: str, package: str, name: str) -> list[src_tools.CallSite]:
    return src_tools.call_sites(host, python, package, name, max_sites=None)


def library_definitions(ctx: RepairContext, name: str) -> list[src_tools.SymbolLocation]:
    """Where the library packages define ``name`` at top level."""
    return across_libraries(ctx, src_tools.locate_definitions, name)


def close_name(name: str, options: Iterable[str], cutoff: float = 0.8) -> str | None:
    matches = difflib.get_close_matches(name, list(options), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def name_tokens(name: str) -> set[str]:
    return {t[:5] for t in re.split(r"_+|(?<=[a-z])(?=[A-Z])", name.lower()) if t and t not in {"get", "set", "is"}}


def rename_score(old: str, new: str) -> float:
    """How likely ``new`` is a rename of ``old``: shared word stems, then spelling."""
    a, b = name_tokens(old), name_tokens(new)
    overlap = len(a & b) / max(1, len(a | b))
    return overlap + 0.5 * difflib.SequenceMatcher(None, old, new).ratio()


def candidate(
    ctx: RepairContext,
    edits: dict[str, str],
    *,
    origin: str,
    rationale: str,
    evidence: Iterable[str] = (),
    extra_checks: Iterable[Check] = (),
) -> Candidate:
    checks: list[Check] = []
    for path in edits:
        checks.append(Check("compile", path))
        module = module_of(ctx, path)
        if module:
            checks.append(Check("import", module, when="during_load"))
    checks.extend(extra_checks)
    evidence = tuple(evidence)
    # the report and the postmortem show every patch with its reason: never leave a person without one
    rationale = rationale.strip() or (
        f"{origin}: {evidence[0] if evidence else 'no reason was given'} "
        f"(edits {', '.join(path.rsplit('/', 1)[-1] for path in edits)})")
    patch = make_patch(
        ctx.host, edits, rationale=rationale, origin=origin, evidence=evidence,
        checks=tuple(c.describe() for c in checks),
    )
    return Candidate(patch=patch, origin=origin, rationale=rationale, evidence=evidence, checks=tuple(checks))


def evidence_line(path: str, lineno: int, text: str) -> str:
    return f"{path}:{lineno}: {text.strip()}"


def library_call_node(ctx: RepairContext, path: str, lineno: int, name: str) -> tuple[Source, ast.Call] | None:
    """The ``name(...)`` call at a library call site, parsed from the library file itself."""
    lib = read_source(ctx, path)
    if lib is None:
        return None
    call = lib.call_at(lineno, name)
    return (lib, call) if call is not None else None


@dataclass(frozen=True)
class Refusal:
    """The library's own ``raise`` a fault ended in."""

    where: str  # file:line
    evidence: str
    stmt: ast.Raise


def library_refusal(ctx: RepairContext, fault: Fault) -> Refusal | None:
    """The library's own ``raise`` the crash ended in; None when it ended anywhere else."""
    if fault.stage != "crash" or not fault.frames or ctx.library_package(fault.frames[-1].file) is None:
        return None
    last = fault.frames[-1]
    lib = read_source(ctx, last.file)
    stmt = lib.statement_at(last.line) if lib else None
    if lib is None or not isinstance(stmt, ast.Raise):
        return None
    return Refusal(f"{last.file}:{last.line}", evidence_line(last.file, stmt.lineno, one_line(lib.segment(stmt))),
                   stmt)


def one_line(text: str) -> str:
    """A statement or a message as one line of a stop or an evidence line (its newlines and indents folded)."""
    return " ".join(text.split())
