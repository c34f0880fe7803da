"""Source edits located with ``ast`` and applied to the text, so formatting and comments stay as they were."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tools import pysyntax
from tools.errors import SourceError


class Source:
    """A Python file's text with its tree; offsets convert ast's (line, utf-8 column) to text positions."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        try:
            self.tree = pysyntax.parse(text)
        except SyntaxError as exc:
            raise SourceError(f"{path} does not parse ({exc.msg} at line {exc.lineno}): cannot edit it") from exc
        self.lines = text.splitlines(keepends=True)
        self._starts = [0]
        for line in self.lines:
            self._starts.append(self._starts[-1] + len(line))

    def pos(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self._starts[lineno - 1] + len(line.encode()[:col].decode(errors="replace"))

    def start(self, node: ast.AST) -> int:
        return self.pos(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.pos(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        return self.text[self.start(node) : self.end(node)]

    def line(self, lineno: int) -> str:
        return self.lines[lineno - 1].rstrip("\n") if 0 < lineno <= len(self.lines) else ""

    def indent_of(self, lineno: int) -> str:
        line = self.line(lineno)
        return line[: len(line) - len(line.lstrip())]

    # -- finding nodes ------------------------------------------------------------------------------------
    def calls_named(self, name: str) -> Iterator[ast.Call]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and callee_name(node) == name:
                yield node

    def call_at(self, lineno: int, name: str) -> ast.Call | None:
        """The innermost call of ``name`` whose span holds ``lineno`` (a frame points at a call's line)."""
        best: ast.Call | None = None
        for call in self.calls_named(name):
            if call.lineno <= lineno <= (call.end_lineno or call.lineno) and (
                best is None or call.lineno >= best.lineno
            ):
                best = call
        return best

    def enclosing_function(self, lineno: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        best = None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                node.lineno <= lineno <= (node.end_lineno or node.lineno)
            ) and (best is None or node.lineno > best.lineno):
                best = node
        return best

    def enclosing_class(self, lineno: int) -> ast.ClassDef | None:
        best = None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef) and node.lineno <= lineno <= (node.end_lineno or node.lineno) and (
                best is None or node.lineno > best.lineno
            ):
                best = node
        return best

    def statement_at(self, lineno: int) -> ast.stmt | None:
        """The innermost simple statement whose span holds ``lineno``."""
        best: ast.stmt | None = None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.stmt) and not hasattr(node, "body") and (
                node.lineno <= lineno <= (node.end_lineno or node.lineno)
            ):
                best = node
        return best

    def imported_from(self, name: str) -> str | None:
        """The module a top-level ``from M import name`` brings ``name`` from."""
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return node.module
        return None

    def module_names(self) -> set[str]:
        names: set[str] = set()
        for node in self.tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names


def conjuncts(test: ast.expr) -> list[ast.expr]:
    """The terms of an ``and`` (a test that is no ``and`` is its own one term)."""
    return list(test.values) if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]


def callee_name(call: ast.Call) -> str | None:
    return last_name(call.func)


def last_name(node: ast.AST) -> str | None:
    """``move`` for ``move`` and for ``shutil.move``; None for anything but a name or an attribute."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain on a plain name (None for anything else, a bare name included)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) and parts else None


def assignment_before(func: ast.AST, name: str, lineno: int) -> ast.Assign | None:
    """The last ``name = …`` in ``func`` before ``lineno``."""
    found: ast.Assign | None = None
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and node.lineno < lineno and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ) and (found is None or node.lineno > found.lineno):
            found = node
    return found


def unpacking_before(func: ast.AST, name: str, lineno: int) -> tuple[ast.Assign, int] | None:
    """The last ``…, name, … = <value>`` (a tuple or list target) in ``func`` before ``lineno``, and the
    position of ``name`` in it; None if a starred target makes the position unknown."""
    found: tuple[ast.Assign, int] | None = None
    for node in ast.walk(func):
        if not (isinstance(node, ast.Assign) and node.lineno < lineno and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Tuple | ast.List)):
            continue
        elts = node.targets[0].elts
        if any(isinstance(e, ast.Starred) for e in elts):
            continue
        for index, elt in enumerate(elts):
            if isinstance(elt, ast.Name) and elt.id == name and (found is None or node.lineno > found[0].lineno):
                found = (node, index)
    return found


def statement_holding(tree: ast.AST, lineno: int) -> ast.stmt | None:
    """The innermost statement (simple or compound) whose span holds ``lineno``."""
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= lineno <= (node.end_lineno or node.lineno) and (
            best is None or node.lineno >= best.lineno
        ):
            best = node
    return best


def param_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The names a caller may pass (positional or by keyword; ``*args``/``**kwargs`` not among them)."""
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]


def local_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = {a.arg for a in func.args.args + func.args.kwonlyargs + func.args.posonlyargs}
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def free_names(node: ast.AST) -> set[str]:
    """The names a definition reads that nothing inside it binds — its parameters (and those of what it nests), its
    assignments, its own imports, its ``except … as`` names, what it defines inside: what its module must give it."""
    loads: set[str] = set()
    bound: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            a = n.args
            bound |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x}
        if isinstance(n, ast.ExceptHandler | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name \
                and n is not node:  # a definition's own name is its module's
            bound.add(n.name)
    return loads - bound


# -- text edits ----------------------------------------------------------------------------------------
def replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def remove_keyword(src: Source, call: ast.Call, keyword: str) -> str:
    """Text of the file with ``keyword=…`` taken out of ``call``, with its comma and its line if alone."""
    kw = next((k for k in call.keywords if k.arg == keyword), None)
    if kw is None:
        raise SourceError(f"{src.path}: the call at line {call.lineno} passes no {keyword}=")
    start, end = src.start(kw), src.end(kw)
    text = src.text
    rest = text[end:]
    stripped = rest.lstrip(" \t")
    if stripped.startswith(","):
        end += len(rest) - len(stripped) + 1
    else:  # last argument: take the comma before it instead
        before = text[:start].rstrip()
        if before.endswith(","):
            start = len(before) - 1
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    if text[line_start:start].strip() == "" and (line_end == -1 or text[end:line_end].strip() == ""):
        start, end = line_start, (line_end + 1 if line_end != -1 else len(text))  # the argument had its own line
    return replace_span(text, start, end, "")


def add_keyword(src: Source, call: ast.Call, keyword: str, value_src: str) -> str:
    """Text of the file with ``keyword=value`` added as the last argument of ``call``, in its layout."""
    args: list[ast.AST] = [*call.args, *call.keywords]
    close = src.end(call) - 1  # the closing parenthesis
    if not args:
        return replace_span(src.text, close, close, f"{keyword}={value_src}")
    last_end = max(src.end(a) for a in args)
    gap = src.text[last_end:close]
    if "\n" in gap:  # one argument per line: add a line with the same indent
        last = max(args, key=lambda a: (a.end_lineno, a.end_col_offset))  # type: ignore[attr-defined]
        indent = src.indent_of(last.lineno)  # type: ignore[attr-defined]
        comma = "" if gap.lstrip().startswith(",") else ","
        insert_at = last_end + (gap.index(",") + 1 if not comma else 0)
        return replace_span(src.text, insert_at, insert_at, f"{comma}\n{indent}{keyword}={value_src},")
    return replace_span(src.text, last_end, last_end, f", {keyword}={value_src}")


def insert_before_statement(src: Source, lineno: int, lines: list[str]) -> str:
    """Text of the file with ``lines`` placed before the statement holding ``lineno``, at its indent."""
    stmt = statement_holding(src.tree, lineno)
    if stmt is None:
        raise SourceError(f"{src.path}: no statement holds line {lineno}")
    indent = src.indent_of(stmt.lineno)
    start = src.pos(stmt.lineno, 0)
    return replace_span(src.text, start, start, "".join(f"{indent}{line}\n" for line in lines))


def rename_keyword(src: Source, call: ast.Call, old: str, new: str) -> str:
    kw = next((k for k in call.keywords if k.arg == old), None)
    if kw is None:
        raise SourceError(f"{src.path}: the call at line {call.lineno} passes no {old}=")
    start = src.start(kw)
    return replace_span(src.text, start, start + len(old), new)


def rename_attribute(src: Source, old: str, new: str) -> tuple[str, int]:
    """Every ``x.old`` in the file becomes ``x.new``; returns the text and how many were renamed."""
    spans = [
        (src.end(node) - len(old), src.end(node))
        for node in ast.walk(src.tree)
        if isinstance(node, ast.Attribute) and node.attr == old
    ]
    text = src.text
    for start, end in sorted(spans, reverse=True):
        text = replace_span(text, start, end, new)
    return text, len(spans)
