"""Python's own parser, one thread at a time.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state, so two threads parsing at once
can fail with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905; seen here with
3.11.7, the scan's rules reading vLLM side by side). medic parses in several threads of one process (the scan's
rules, the checks beside the load, the canary's build), so every ``ast.parse`` and ``compile`` of medic's own
process goes through here. Code medic sends to the target env (the probes) parses there, alone.
"""

from __future__ import annotations

import ast
import threading
from types import CodeType

_ONE_AT_A_TIME = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``; SyntaxError as ast raises it."""
    with _ONE_AT_A_TIME:
        return ast.parse(source, filename)


def parse_expression(source: str) -> ast.expr:
    """The expression ``source`` is (``ast.parse(source, mode="eval").body``)."""
    with _ONE_AT_A_TIME:
        return ast.parse(source, mode="eval").body


def check_compiles(source: str, filename: str) -> None:
    """Raise SyntaxError (or ValueError for a NUL byte) where ``source`` does not compile; nothing is run."""
    with _ONE_AT_A_TIME:
        compile(source, filename, "exec", dont_inherit=True)


def compile_expression(tree: ast.expr, filename: str = "<expression>") -> CodeType:
    """The code object of an expression's tree (to ``eval``)."""
    with _ONE_AT_A_TIME:
        return compile(ast.Expression(tree), filename, "eval", dont_inherit=True)
