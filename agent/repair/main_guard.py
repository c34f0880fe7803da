"""A script's top-level work moved under a ``__main__`` guard, so that a process started with 'spawn' can
re-import it (as ``__mp_main__``) and get its definitions without running the work again.

What stays at module level: imports, function and class definitions, assignments of literal constants, and
``if``/``try`` blocks made only of those (the things a child needs to unpickle what it is sent); everything
else is work and goes, in its order, under the guard at the end. A definition written after some work is kept
at module level only if moving it above that work changes nothing: it binds a name nothing else binds, and
nothing it evaluates when defined (decorators, defaults, annotations, bases, a class body) is bound by that
work; an import after work stays with the work (an import can depend on what the work set: ``sys.path``,
``os.environ``). When that cannot be shown, there is no rewrite. Text is moved by lines, comments kept; the
lines inside a multi-line string are never re-indented, and the result is checked against the original tree:
the same statements, only placed under the guard.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass

from tools import pysyntax

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
          ast.DictComp, ast.GeneratorExp)
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Guarded:
    text: str
    work: tuple[int, ...]  # first lines of the statements moved under the guard
    hoisted: tuple[int, ...]  # first lines of definitions kept at module level from below some work


def guard_module(text: str, idiom: str) -> Guarded | None:
    """``text`` with its top-level work under ``idiom`` (``if __name__ == '__main__':``), or None when the
    module has no work, does not parse, or cannot be rewritten without changing what it does."""
    try:
        tree = pysyntax.parse(text)
        guard = pysyntax.parse(idiom + "\n    pass").body[0]
    except SyntaxError:
        return None
    if not isinstance(guard, ast.If):
        return None
    body = tree.body
    kinds = [stays(stmt) for stmt in body]
    if all(kinds) or shares_a_line(body, kinds):
        return None
    first = kinds.index(False)
    work = [i for i in range(first, len(body)) if not kinds[i]]
    hoisted = [i for i in range(first, len(body)) if kinds[i]]
    for i in hoisted:
        if not movable_above(body, i, [w for w in work if w < i]):
            return None
    lines = text.split("\n")
    indent = indent_unit(text)
    protected = string_continuations(text)
    out: list[str] = []
    for i in range(first):
        out += chunk(lines, body, i)
    for i in hoisted:
        out += chunk(lines, body, i)
    moved: list[str] = []
    for i in work:
        start = leading_start(body, i)
        for n, line in enumerate(chunk(lines, body, i), start=start):
            moved.append(line if not line.strip() or n in protected else indent + line)
    while moved and not moved[0].strip():
        out.append(moved.pop(0))
    out.append(guard_line(idiom))
    out += moved
    out += lines[body[-1].end_lineno or len(lines):]  # what follows the last statement (comments, the newline)
    new_text = "\n".join(out)
    if not same_statements(tree, new_text, [body[i] for i in (*range(first), *hoisted)], [body[i] for i in work],
                           guard):
        return None
    return Guarded(new_text, tuple(body[i].lineno for i in work), tuple(body[i].lineno for i in hoisted))


def stays(stmt: ast.stmt) -> bool:
    """What a re-importing child must still get: imports, definitions, literal constants (and blocks of them)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, *DEFINITIONS, ast.Pass)):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
        return True  # a docstring
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return stmt.value is None or literal(stmt.value)
    if isinstance(stmt, ast.If) and not is_main_guard(stmt):
        return all(stays(s) for s in (*stmt.body, *stmt.orelse))
    if isinstance(stmt, ast.Try):
        blocks = (*stmt.body, *stmt.orelse, *stmt.finalbody, *(s for h in stmt.handlers for s in h.body))
        return all(stays(s) for s in blocks)
    return False


def literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def is_main_guard(stmt: ast.If) -> bool:
    test = stmt.test
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def shares_a_line(body: list[ast.stmt], kinds: list[bool]) -> bool:
    """``import x; run()``: a line holding a statement that stays and one that moves cannot be split by lines."""
    return any(body[i].lineno == body[i - 1].end_lineno and kinds[i] != kinds[i - 1] for i in range(1, len(body)))


def movable_above(body: list[ast.stmt], i: int, work_before: list[int]) -> bool:
    stmt = body[i]
    if not isinstance(stmt, (*DEFINITIONS, ast.Assign, ast.AnnAssign)):
        return False  # imports and blocks after work stay with the work (they may depend on what it set)
    mine = bound_names(stmt)
    elsewhere = set().union(*(bound_names(s) for j, s in enumerate(body) if j != i))
    if mine & elsewhere:
        return False
    earlier_work = set().union(*(bound_names(body[w]) for w in work_before))
    return not (evaluated_when_defined(stmt) & earlier_work)


def bound_names(stmt: ast.stmt) -> set[str]:
    """Module-level names a top-level statement binds (not those of the scopes it creates)."""
    names: set[str] = set()
    for node in walk_module_scope(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (*DEFINITIONS,)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


def walk_module_scope(node: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``node`` that runs in the module's scope: a nested scope's header, never its body."""
    yield node
    if isinstance(node, SCOPES) and not isinstance(node, ast.ClassDef):
        for part in header(node):
            yield from walk_module_scope(part)
        return
    for child in ast.iter_child_nodes(node):
        yield from walk_module_scope(child)


def header(node: ast.AST) -> list[ast.AST]:
    """What a function or comprehension evaluates where it is written (decorators, defaults, annotations,
    the first iterable)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        notes = [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                 if a is not None and a.annotation is not None]
        return [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None), *notes,
                *([node.returns] if node.returns else [])]
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return [node.generators[0].iter]
    return []


def evaluated_when_defined(stmt: ast.stmt) -> set[str]:
    parts: list[ast.AST] = header(stmt) if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else [stmt]
    if isinstance(stmt, ast.ClassDef):  # a class body runs when the class is defined
        parts = [*stmt.decorator_list, *stmt.bases, *stmt.keywords, *stmt.body]
    return {n.id for part in parts for n in walk_module_scope(part)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def leading_start(body: list[ast.stmt], i: int) -> int:
    """The first line of statement ``i`` with the comments and blank lines above it (1-based)."""
    return (body[i - 1].end_lineno or 0) + 1 if i else 1


def chunk(lines: list[str], body: list[ast.stmt], i: int) -> list[str]:
    return lines[leading_start(body, i) - 1 : body[i].end_lineno]


def indent_unit(text: str) -> str:
    """The file's own indentation step (its first indented block), four spaces if it has none."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.INDENT:
                return tok.string
    except (tokenize.TokenError, SyntaxError):
        pass
    return "    "


def string_continuations(text: str) -> set[int]:
    """Lines (1-based) that begin inside a multi-line string: indenting them would change the string."""
    inside: set[int] = set()
    opened: list[int] = []  # f-strings (3.12+) open and close as tokens of their own
    fstring_start = getattr(tokenize, "FSTRING_START", -1)
    fstring_end = getattr(tokenize, "FSTRING_END", -1)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == fstring_start:
            opened.append(tok.start[0])
        elif tok.type == fstring_end and opened:
            inside.update(range(opened.pop() + 1, tok.end[0] + 1))
        elif tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
            inside.update(range(tok.start[0] + 1, tok.end[0] + 1))
    return inside


def guard_line(idiom: str) -> str:
    return idiom.strip()


def same_statements(tree: ast.Module, new_text: str, kept: list[ast.stmt], work: list[ast.stmt],
                    guard: ast.stmt) -> bool:
    """The rewrite is the original statements, only placed: the kept ones at module level, the work under the
    guard, each one the same tree as before."""
    try:
        new = pysyntax.parse(new_text).body
    except SyntaxError:
        return False
    if len(new) != len(kept) + 1 or not isinstance(new[-1], ast.If) or not isinstance(guard, ast.If):
        return False
    last = new[-1]
    return (all(ast.dump(a) == ast.dump(b) for a, b in zip(new[:-1], kept, strict=True))
            and ast.dump(last.test) == ast.dump(guard.test) and not last.orelse
            and len(last.body) == len(work)
            and all(ast.dump(a) == ast.dump(b) for a, b in zip(last.body, work, strict=True)))
