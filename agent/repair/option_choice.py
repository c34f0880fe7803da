"""Where a library's host-dependent choice meets a fault: read from its source, nothing run.

vLLM's CPU attention, for instance, calls its compiled op with ``isa=self.isa``; the class set
``self.isa = _get_attn_isa(self.dtype, self.block_size, self.head_dim)``, a module function whose ``if``/``elif``
chain returns a kernel's name from those inputs and the host's CPU flags; and it set
``self.block_size = vllm_config.cache_config.block_size`` and ``self.dtype = vllm_config.model_config.dtype``, the
settings a job gives as ``--block-size`` / ``--dtype``. This module finds that chain from the failing frame: the
attribute the frame's call passes, the choice function that set it, and the config fields each input was read from.
Which value of those fields takes a branch that works is asked of the target env (derived_option_branch.py).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Input:
    param: str  # the choice function's parameter
    attr: str  # the instance attribute passed for it (``self.block_size``): what the fault's message may name
    source: str  # what the attribute was read from: ``vllm_config.cache_config.block_size``
    field: str  # the config field: ``block_size``


@dataclass(frozen=True)
class Choice:
    function: str  # the choice function's name, a function of the frame's module
    line: int  # its ``def`` line
    chosen: str  # the attribute it set, which the failing call passed (``isa``)
    call_line: int  # where the class called it
    inputs: tuple[Input, ...]


def choice_at(tree: ast.Module, line: int) -> Choice | None:
    """The choice whose result the call at ``line`` passes, when it is a module function's ``if``/``elif`` answer."""
    cls = innermost_class(tree, line)
    call = innermost_call(tree, line)
    if cls is None or call is None:
        return None
    passed = {a for arg in [*call.args, *(k.value for k in call.keywords)] if (a := self_attr(arg))}
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and chooses(n)}
    assigned = self_assignments(cls)
    for attr in sorted(passed):
        value = assigned.get(attr)
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in functions):
            continue
        func = functions[value.func.id]
        inputs = tuple(found for param, arg in bound(func, value) if (found := traced(param, arg, assigned)))
        return Choice(func.name, func.lineno, attr, value.lineno, inputs)
    return None


def innermost_class(tree: ast.AST, line: int) -> ast.ClassDef | None:
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.lineno <= line <= (n.end_lineno or 0)]
    return max(classes, key=lambda n: n.lineno, default=None)


def innermost_call(tree: ast.AST, line: int) -> ast.Call | None:
    """The smallest call whose text starts on ``line`` (a traceback names a call by its first line)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == line]
    return max(calls, key=lambda n: (n.col_offset, -(n.end_lineno or n.lineno)), default=None)


def self_attr(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def self_assignments(cls: ast.ClassDef) -> dict[str, ast.expr]:
    """``self.X = <value>`` in the class's methods (the last one written wins, as at run time mostly)."""
    out: dict[str, ast.expr] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and (attr := self_attr(node.targets[0])):
            out[attr] = node.value
    return out


def chooses(func: ast.FunctionDef) -> bool:
    """A function that answers with one of several string constants: a choice among named ways."""
    answers = {n.value.value for n in ast.walk(func) if isinstance(n, ast.Return)
               and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    return len(answers) >= 2 and any(isinstance(n, ast.If) for n in func.body)


def bound(func: ast.FunctionDef, call: ast.Call) -> list[tuple[str, ast.expr]]:
    params = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    pairs = list(zip(params, call.args, strict=False))
    return pairs + [(k.arg, k.value) for k in call.keywords if k.arg]


def traced(param: str, arg: ast.expr, assigned: dict[str, ast.expr]) -> Input | None:
    """The config field an instance attribute passed to the choice was read from (``a.b.field``)."""
    attr = self_attr(arg)
    value = assigned.get(attr) if attr else None
    if attr is None or not isinstance(value, ast.Attribute):
        return None
    return Input(param, attr, ast.unparse(value), value.attr)
