"""The commands a Python launcher starts, read from its syntax tree without running it.

A launcher starts the server and the client with ``subprocess`` (``Popen([...])``, ``run(shlex.split("…"))``,
``os.system("…")``). Each list or string that may be a command is evaluated from what the script assigns: string
and number constants, f-strings, ``+`` of them, ``str(x)``, ``os.environ.get("X", default)``/``os.getenv``
(the job's environment first), ``sys.executable`` (the python that runs the launcher: ``python``, which the job's
env puts first on PATH), a list's ``*spread`` and ``json.dumps`` of a literal. A name assigned two different
values, or anything else, is not guessed: the command holding it is listed with what could not be read.
"""

from __future__ import annotations

import ast
import json
import shlex
from collections.abc import Mapping
from typing import Any

from tools import pysyntax

PYTHON = "python"  # sys.executable: the interpreter the job's PATH gives (tools/wrapper.py maps it to --python)


class Unknown(Exception):
    """A value the launcher computes at run time: ``what`` says which."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class Values:
    """Evaluates expressions of the launcher from its own constant assignments."""

    def __init__(self, tree: ast.AST, env: Mapping[str, str]) -> None:
        self.env = env
        self.assigned: dict[str, list[ast.expr]] = {}
        self.extended: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
            for target in targets:
                if isinstance(target, ast.Name):
                    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                    if value is not None:
                        self.assigned.setdefault(target.id, []).append(value)
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
                self.extended.setdefault(node.target.id, []).append(node.value)  # `cmd += ["--port", PORT]`
        self.depth = 0

    def name(self, name: str) -> Any:
        values = self.assigned.get(name) or []
        if not values:
            raise Unknown(name)
        if len({ast.dump(v) for v in values}) > 1:
            raise Unknown(f"{name} (assigned more than once)")
        if self.depth > 20:
            raise Unknown(name)
        self.depth += 1
        try:
            value = self.of(values[0])
            for more in self.extended.get(name, []):  # in the order written: a launcher builds its command so
                value = value + self.of(more)
            return value
        finally:
            self.depth -= 1

    def of(self, node: ast.expr) -> Any:
        try:
            return self.value_of(node)
        except (TypeError, ValueError, KeyError, RecursionError) as exc:  # `"a" + 1` and the like: run time's
            raise Unknown(ast.unparse(node)[:60]) from exc

    def value_of(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)):
            return node.value
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.JoinedStr):
            return "".join(str(self.of(v.value)) if isinstance(v, ast.FormattedValue) else str(self.of(v))
                           for v in node.values)
        if isinstance(node, (ast.List, ast.Tuple)):
            out: list[Any] = []
            for item in node.elts:
                out += list(self.of(item.value)) if isinstance(item, ast.Starred) else [self.of(item)]
            return out
        if isinstance(node, ast.Dict):
            return {self.of(k): self.of(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.of(node.left) + self.of(node.right)
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.executable":
            return PYTHON
        if isinstance(node, ast.Call):
            return self.call(node)
        raise Unknown(ast.unparse(node)[:60])

    def call(self, node: ast.Call) -> Any:
        func = ast.unparse(node.func)
        args = node.args
        if func == "str" and len(args) == 1:
            return str(self.of(args[0]))
        if func in ("os.environ.get", "os.getenv") and args:
            key = self.of(args[0])
            if key in self.env:
                return self.env[key]
            if len(args) > 1:
                return self.of(args[1])
            raise Unknown(f"${key}")
        if func == "json.dumps" and args:
            return json.dumps(self.of(args[0]), separators=(",", ":") if _compact(node) else None)
        if func == "shlex.split" and args:
            return shlex.split(str(self.of(args[0])))
        if func in ("str.join", "' '.join", '" ".join') and args:
            return " ".join(map(str, self.of(args[0])))
        raise Unknown(ast.unparse(node)[:60])


def _compact(node: ast.Call) -> bool:
    return any(kw.arg == "separators" for kw in node.keywords)


RUNNERS = frozenset({"Popen", "run", "call", "check_call", "check_output", "system", "execvp", "execv",
                     "create_subprocess_exec", "create_subprocess_shell"})


def launcher_commands(text: str, env: Mapping[str, str]) -> tuple[list[tuple[list[str], int, list[str]]], list[str]]:
    """(each command the launcher passes to a subprocess runner: its words, line and what in it could not be read;
    the runners whose command could not be read at all). A runner's command may be a list, a string (split as
    the shell would) or a name assigned one; ``os.execv(path, args)`` passes it second."""
    try:
        tree = pysyntax.parse(text)
    except SyntaxError as exc:
        return [], [f"the launcher ({exc.msg}, line {exc.lineno})"]
    values = Values(tree, env)
    commands: list[tuple[list[str], int, list[str]]] = []
    unseen: list[str] = []
    for node in ast.walk(tree):
        func = ast.unparse(node.func) if isinstance(node, ast.Call) else ""
        if not (isinstance(node, ast.Call) and func.rsplit(".", 1)[-1] in RUNNERS and node.args):
            continue
        first = node.args[1] if func.startswith("os.exec") and len(node.args) > 1 else node.args[0]
        unknown: list[str] = []
        try:
            if isinstance(first, (ast.List, ast.Tuple)):  # word by word: one unknown word spoils only itself
                value: Any = [_word(values, item, unknown) for item in first.elts]
            else:
                value = values.of(first)
        except Unknown as exc:
            unseen.append(f"the command of `{ast.unparse(node)[:80]}` (line {node.lineno}: {exc.what})")
            continue
        try:
            words = shlex.split(value) if isinstance(value, str) else (
                [str(w) for w in _flat(value)] if isinstance(value, list) else [])
        except ValueError:  # a string the shell could not split either
            continue
        if words:
            commands.append((words, node.lineno, unknown))
    return commands, unseen


def _word(values: Values, item: ast.expr, unknown: list[str]) -> Any:
    try:
        return values.of(item.value) if isinstance(item, ast.Starred) else values.of(item)
    except Unknown as exc:
        unknown.append(exc.what)
        return f"<{exc.what}>"


def _flat(value: Any) -> list[Any]:
    return [w for v in value for w in (v if isinstance(v, list) else [v])]
