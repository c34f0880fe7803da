"""Derived repairs for a stand-in short of a member: on this host the library swaps a real class for a stand-in
(``torch.cuda.Event = _EventPlaceholder``) that lacks a member its callers use.

- a sibling stand-in in the same module defines that member: give the stand-in the same definition;
- no sibling defines it, but every method the stand-in gives is a no-op (the module's ``def noop(*args,
  **kwargs): pass``, or a lambda returning None: the library's word that these calls do nothing on this host),
  and the caller calls the member for its effect alone (the call is a statement of its own, its result unused):
  give it the same no-op;
- the caller uses the member's answer, and the class the stand-in replaces documents that answer in terms of the
  stand-in's own no-op methods: ``Event.query`` is "whether all work captured by the event has completed", and
  ``Event.synchronize``, which "waits until the completion of all work captured", returns at once on the stand-in,
  so nothing is ever pending: the answer is True (read from the replaced class's docstrings in the target env).

Like every repair of the library against its host (agent/repair/derived_platform.py), these edit the library's
own files.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agent.repair.context import candidate, evidence_line, library_definitions, read_source
from agent.repair.derived_members import NO_ATTRIBUTE
from agent.repair.derived_platform import ask_python, host_frames
from agent.repair.edits import Source, replace_span
from agent.repair.types import Candidate, Fault, RepairContext
from tools.source import SymbolLocation

StandIn = tuple[SymbolLocation, Source, dict[ast.ClassDef, list[str]], ast.ClassDef]


def stand_in_classes(ctx: RepairContext, cls: str) -> Iterator[StandIn]:
    """Each library class named ``cls`` that its module puts in place of another's: (where, the module's source,
    the module's stand-ins and what each replaces, the class)."""
    for place in library_definitions(ctx, cls)[:5]:
        src = read_source(ctx, place.path)
        if src is None or place.kind != "class":
            continue
        stands_in = stand_ins(src)
        target = next((c for c in stands_in if c.name == cls), None)
        if target is not None:
            yield place, src, stands_in, target


def stand_in_member(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = NO_ATTRIBUTE.search(fault.message)
    if not match or fault.finding is not None:
        return []
    cls, attr = match["cls"], match["attr"]
    for place, src, stands_in, target in stand_in_classes(ctx, cls):
        if member_of(target, attr) is not None:
            continue
        for sibling in stands_in:
            given = member_of(sibling, attr)
            if sibling is target or given is None:
                continue
            text = add_member(src, target, given, attr)
            if text is None:
                continue
            replaced = ", ".join(stands_in[target])
            why = (f"on this host the library puts its stand-in {cls} in place of {replaced}, and callers ask it "
                   f"for {attr}; the sibling stand-in {sibling.name} defines {attr}: give {cls} the same")
            return [candidate(ctx, {place.path: text}, origin="derived:platform:stand_in_member", rationale=why,
                              evidence=[f"{place.path}:{target.lineno}: class {cls} (in place of {replaced})",
                                        evidence_line(place.path, given.lineno, src.line(given.lineno))])]
    return []


def stand_ins(src: Source) -> dict[ast.ClassDef, list[str]]:
    """The module's classes assigned, at top level, in place of another module's attribute, and what they replace."""
    classes = {node.name: node for node in src.tree.body if isinstance(node, ast.ClassDef)}
    out: dict[ast.ClassDef, list[str]] = {}
    for node in src.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in classes:
            for target in node.targets:
                if isinstance(target, ast.Attribute):
                    out.setdefault(classes[node.value.id], []).append(ast.unparse(target))
    return out


def member_of(cls: ast.ClassDef, attr: str) -> ast.stmt | None:
    """Where ``cls`` defines ``attr``: a method, a class attribute, or ``self.attr = …`` in ``__init__``."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attr:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
            return node
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                    and t.value.id == "self" for t in stmt.targets
                ):
                    return stmt
    return None


def add_member(src: Source, target: ast.ClassDef, given: ast.stmt, attr: str) -> str | None:
    """``target``'s text with ``given`` copied in the same shape: after its ``__init__``'s last statement for a
    ``self.x = …`` line, at the end of its body otherwise."""
    in_init = isinstance(given, ast.Assign) and isinstance(given.targets[0], ast.Attribute)
    if in_init:
        init = next((n for n in target.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            return None
        anchor = init.body[-1]
    else:
        anchor = target.body[-1]
    indent = src.indent_of(anchor.lineno)
    body = [line.strip() if in_init else line for line in src.segment(given).splitlines()]
    cut = len(src.indent_of(given.lineno))
    lines = [f"{indent}{body[0].lstrip()}", *(f"{indent}{line[cut:]}" for line in body[1:])]
    at = src.end(anchor)
    return replace_span(src.text, at, at, "\n" + "\n".join(lines))


@dataclass(frozen=True)
class NoopStandIn:
    """A stand-in class whose every method is the library's no-op and whose siblings do not define the missing
    member: the place the two no-op repairs below give it one."""

    cls: str
    attr: str
    place: Any
    src: Source
    stands_in: dict[Any, list[str]]
    target: ast.ClassDef
    methods: list[tuple[str, ast.expr]]
    caller: Source
    frame: Any

    def with_member(self, value: str) -> str:
        """The stand-in's module with ``self.<attr> = value`` as the last line of its ``__init__``."""
        init = next(n for n in self.target.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        at = self.src.end(init.body[-1])
        return replace_span(self.src.text, at, at, f"\n{self.src.indent_of(init.body[-1].lineno)}self.{self.attr} = "
                                                   f"{value}")


def noop_stand_ins(ctx: RepairContext, fault: Fault, used: Callable[[Source, int, str], bool]
                   ) -> Iterator[NoopStandIn]:
    """For ``'X' object has no attribute 'a'`` raised at a line where ``used`` says how the caller uses ``a``:
    each stand-in X on this host whose methods are all no-ops and whose siblings do not define ``a``."""
    match = NO_ATTRIBUTE.search(fault.message)
    frames = host_frames(ctx, fault)
    if not match or fault.finding is not None or not frames:
        return
    cls, attr = match["cls"], match["attr"]
    caller = read_source(ctx, frames[0].file)
    if caller is None or not used(caller, frames[0].line, attr):
        return
    for place, src, stands_in, target in stand_in_classes(ctx, cls):
        if any(member_of(c, attr) is not None for c in stands_in):
            continue  # a sibling's definition is stand_in_member's answer
        methods = init_methods(target)
        if methods and all(is_noop(src, value) for _, value in methods):
            yield NoopStandIn(cls, attr, place, src, stands_in, target, methods, caller, frames[0])


def noop_member(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    for it in noop_stand_ins(ctx, fault, called_for_effect):
        value = it.methods[0][1]
        text = it.with_member(ast.unparse(value))
        replaced = ", ".join(it.stands_in[it.target])
        why = (f"on this host the library puts its stand-in {it.cls} in place of {replaced}; every method it gives "
               f"({', '.join(n for n, _ in it.methods)}) is the no-op {ast.unparse(value)}, and the caller calls "
               f"{it.attr} for its effect alone: give {it.cls} the same no-op for {it.attr}")
        return [candidate(ctx, {it.place.path: text}, origin="derived:platform:noop_member", rationale=why,
                          evidence=[f"{it.place.path}:{it.target.lineno}: class {it.cls} (in place of {replaced})",
                                    evidence_line(it.frame.file, it.frame.line, it.caller.line(it.frame.line))])]
    return []


def called_for_effect(src: Source, lineno: int, attr: str) -> bool:
    """Whether line ``lineno`` is a statement of its own that calls ``….attr(…)`` and drops the result."""
    return any(isinstance(node, ast.Expr) and node.lineno == lineno and isinstance(node.value, ast.Call)
               and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == attr
               for node in ast.walk(src.tree))


def init_methods(cls: ast.ClassDef) -> list[tuple[str, ast.expr]]:
    """The callables ``__init__`` gives (``self.x = some_function`` or ``self.x = lambda …``), by name."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    out: list[tuple[str, ast.expr]] = []
    for stmt in init.body if init else []:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
                and isinstance(stmt.value, ast.Name | ast.Lambda)):
            out.append((stmt.targets[0].attr, stmt.value))
    return out


def is_noop(src: Source, value: ast.expr) -> bool:
    """A lambda returning None, or a module function that takes any arguments and does nothing."""
    if isinstance(value, ast.Lambda):
        return isinstance(value.body, ast.Constant) and value.body.value is None
    func = next((n for n in src.tree.body if isinstance(n, ast.FunctionDef) and n.name == getattr(value, "id", "")),
                None)
    if func is None or func.args.vararg is None or func.args.kwarg is None or func.args.args:
        return False
    body = [n for n in func.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return all(isinstance(n, ast.Pass) or (isinstance(n, ast.Return) and n.value is None) for n in body)


# The replaced class's own words: a member that answers whether the captured work has completed and a member that
# waits for that completion, or a member always True for an event never recorded and the member that records it.
# A stand-in whose waiting (recording) member does nothing has no work pending.
COMPLETION_QUESTION = re.compile(r"(?is)\b(?:check\w*|returns?\s+true)\s+if\s+all\s+(?:the\s+)?work\b.{0,80}?"
                                 r"\bha(?:s|ve)\s+completed\b")
WAITS_FOR_COMPLETION = re.compile(r"(?is)\bwait\w*\s+(?:until|for)\s+(?:the\s+)?(?:completion\s+of\s+all\s+work|"
                                  r"\w+\s+to\s+complete)\b")
TRUE_UNRECORDED = re.compile(r"(?is)\balways\s+returns?\s+`*true`*\s+if\s+the\s+event\s+was\s+not\s+recorded\b")
RECORDS_EVENT = re.compile(r"(?is)(?:^|\.\s+|\n\s*)records?\s+the\s+event\b")
ANSWERS, SETTLES = (COMPLETION_QUESTION, TRUE_UNRECORDED), (WAITS_FOR_COMPLETION, RECORDS_EVENT)
DOCS = """
import importlib, inspect, json
parts, obj = dotted.split("."), None
for cut in range(len(parts), 0, -1):
    try:
        obj = importlib.import_module(".".join(parts[:cut]))
    except ImportError:
        continue
    for part in parts[cut:]:
        obj = getattr(obj, part, None)
    break
print(json.dumps({n: inspect.getdoc(getattr(obj, n, None)) or "" for n in names} if inspect.isclass(obj) else None))
"""


def answered_member(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    for it in noop_stand_ins(ctx, fault, answer_used):
        attr, names = it.attr, [n for n, _ in it.methods]
        for replaced in it.stands_in[it.target]:
            docs = replaced_docs(ctx, replaced, [attr, *names]) or {}
            waiting = settling_noop(docs, attr, names)
            if waiting is None:
                continue
            why = (f"on this host the library puts its stand-in {it.cls} in place of {replaced}, whose {attr}() is by "
                   f"its own words True once what its {waiting}() handles is done (see the evidence); the stand-in's "
                   f"{waiting} is a no-op, so nothing is ever pending: {attr}() is True")
            text = it.with_member("lambda: True")
            return [candidate(ctx, {it.place.path: text}, origin="derived:platform:noop_answer", rationale=why,
                              evidence=[f"{it.place.path}:{it.target.lineno}: class {it.cls} (in place of {replaced})",
                                        f"{replaced}.{attr}: {quote(docs[attr], ANSWERS)}",
                                        f"{replaced}.{waiting}: {quote(docs[waiting], SETTLES)}",
                                        evidence_line(it.frame.file, it.frame.line, it.caller.line(it.frame.line))])]
    return []


def settling_noop(docs: dict[str, str], attr: str, noops: list[str]) -> str | None:
    """The stand-in's no-op method that settles ``attr``'s answer as True, by the replaced class's docstrings:
    ``attr`` answers whether the captured work has completed and the method waits for that completion, or ``attr``
    is always True for an event never recorded and the method is the one that records it."""
    answer = docs.get(attr, "")
    if COMPLETION_QUESTION.search(answer):
        return next((n for n in noops if WAITS_FOR_COMPLETION.search(docs.get(n, ""))), None)
    if TRUE_UNRECORDED.search(answer):
        return next((n for n in noops if RECORDS_EVENT.search(docs.get(n, ""))), None)
    return None


def answer_used(src: Source, lineno: int, attr: str) -> bool:
    """Whether line ``lineno`` calls ``….attr()`` and uses what it returns (not a statement of its own)."""
    calls = [node for node in ast.walk(src.tree) if isinstance(node, ast.Call) and node.lineno == lineno
             and isinstance(node.func, ast.Attribute) and node.func.attr == attr]
    return bool(calls) and not called_for_effect(src, lineno, attr)


def replaced_docs(ctx: RepairContext, dotted: str, names: list[str]) -> dict[str, str] | None:
    """The docstrings of ``names`` on the class ``dotted`` names in the target env (None: not a class there)."""
    memo = f"docs:{dotted}:{','.join(names)}"
    if memo not in ctx.memo:
        answer = ask_python(ctx, f"dotted, names = {dotted!r}, {names!r}\n{DOCS}")
        ctx.memo[memo] = answer if isinstance(answer, dict) else None
    return ctx.memo[memo]


def quote(doc: str, patterns: tuple[re.Pattern[str], ...]) -> str:
    """The words of ``doc`` the derivation rests on (else its start)."""
    found = next((m for p in patterns if (m := p.search(doc))), None)
    return " ".join((found.group(0) if found else doc).split())[:160]
