"""Derived repair for a stand-in whose signature lags the kernel it replaces: on a host without Triton the library
puts a plain function in place of a Triton kernel (``rejection_sampler.sample_recovered_tokens_kernel =
cpu_tl.sample_recovered_tokens_kernel``, a wrapper of ``_sample_recovered_tokens_kernel_impl``), and the kernel
has since grown a keyword the stand-in does not take: ``_…_impl() got an unexpected keyword argument 'K'``.

Proven from the installed code before anything is proposed:
- the failing call passes ``K=`` to the kernel name its own module defines, and that kernel takes ``K``;
- the function the message names is the stand-in for that kernel: its module binds the kernel's name to it
  (``name = Wrapper(impl)`` or ``name = impl``), and the library assigns that name in place of the kernel's;
- ``K`` cannot change the result: every use of it in the kernel is the test of a branch whose two arms differ in
  a dtype alone (it picks a precision, not a computation), and the caller turns the same value into the dtype of
  the data it hands the kernel, so the stand-in, which reads that data at its own dtype, gets the same precision.
The stand-in then accepts ``K=`` with the kernel's own default, else the caller's, and ignores it. Like every
repair of the library against its host (agent/repair/derived_platform.py), this edits the library's own files.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator

from agent.repair.context import candidate, evidence_line, library_definitions, read_source
from agent.repair.derived_calls import UNEXPECTED, callee_short
from agent.repair.derived_platform import host_frames
from agent.repair.edits import Source, param_names, replace_span
from agent.repair.types import Candidate, Fault, NotProven, RepairContext
from tools import source as src_tools
from tools.errors import MedicError

DTYPE = re.compile(r"^(?:b?float|u?int|complex)\d+$")


def lagging_stand_in(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = UNEXPECTED.search(fault.message) if fault.finding is None else None
    frames = host_frames(ctx, fault)
    if not match or not frames:
        return []
    impl_name, keyword = callee_short(match["callee"]), match["kw"]
    caller = read_source(ctx, frames[0].file)
    found = caller and kernel_call(caller, frames[0].line, keyword)
    if not caller or not found:
        return []
    call, kernel_name = found
    kernel = top_level_def(caller.tree, kernel_name)
    func = caller.enclosing_function(call.lineno)
    if kernel is None or func is None or keyword not in param_names(kernel):
        return []
    if not precision_only(kernel, keyword):
        if not (uses := other_uses(kernel, keyword)):
            return []  # never read: nothing is known of what it would change
        use = uses[0]
        raise NotProven(f"{impl_name}() stands in on this host for the kernel {kernel_name} ({caller.path}:"
                        f"{kernel.lineno}), which takes {keyword}= and the stand-in does not; the kernel uses "
                        f"{keyword} for more than a dtype (line {use.lineno}: `{caller.line(use.lineno).strip()}`), "
                        "so a stand-in that ignores it is not proven to compute the same: no change is proposed")
    passed = next(k.value for k in call.keywords if k.arg == keyword)
    chosen = precision_carried(func, passed)
    value = (default_of(kernel, keyword) or default_of(func, ast.unparse(passed))) if chosen else None
    if chosen is None or value is None:
        return []
    for place in library_definitions(ctx, impl_name)[:5]:
        src = read_source(ctx, place.path)
        impl = top_level_def(src.tree, impl_name) if src else None
        wrapped = src and binding_of(src, kernel_name, impl_name)
        if not src or impl is None or not wrapped or takes_more(impl) or keyword in param_names(impl):
            continue
        substituted = substitution(ctx, kernel_name)
        text = add_parameter(src, impl, f"{keyword}={value}")
        if substituted is None or text is None:
            continue
        why = (f"on this host the library puts {impl_name} in place of the kernel {kernel_name}, which takes "
               f"{keyword}= and the stand-in does not; the kernel reads {keyword} only to pick a dtype, and the caller "
               f"turns the same value into the dtype of the data it passes ({ast.unparse(chosen)}), which the "
               f"stand-in reads at that dtype: accept {keyword}={value} and ignore it")
        return [candidate(ctx, {place.path: text}, origin="derived:platform:lagging_stand_in", rationale=why,
                          evidence=[evidence_line(frames[0].file, call.lineno, caller.line(call.lineno)),
                                    evidence_line(caller.path, chosen.lineno, caller.line(chosen.lineno)),
                                    f"{caller.path}:{kernel.lineno}: def {kernel_name}("
                                    f"{', '.join(param_names(kernel))})",
                                    evidence_line(src.path, wrapped.lineno, src.line(wrapped.lineno)),
                                    evidence_line(substituted.path, substituted.lineno, substituted.text),
                                    f"{src.path}:{impl.lineno}: def {impl_name}({', '.join(param_names(impl))})"])]
    return []


def kernel_call(src: Source, lineno: int, keyword: str) -> tuple[ast.Call, str] | None:
    """The call spanning ``lineno`` that passes ``keyword=``, and the name it calls (``k[grid](…)`` calls ``k``)."""
    for node in ast.walk(src.tree):
        if (isinstance(node, ast.Call) and node.lineno <= lineno <= (node.end_lineno or node.lineno)
                and any(k.arg == keyword for k in node.keywords)):
            func = node.func.value if isinstance(node.func, ast.Subscript) else node.func
            if isinstance(func, ast.Name):
                return node, func.id
    return None


def top_level_def(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def default_of(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str | None:
    """The literal default ``func`` gives parameter ``name`` (None: none, or not a literal)."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    default = next((d for a, d in pairs if a.arg == name), None)
    return ast.unparse(default) if isinstance(default, ast.Constant) else None


class DtypeBlind(ast.NodeTransformer):
    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        return ast.Name("DTYPE") if DTYPE.match(node.attr) else self.generic_visit(node)


def dtype_blind(node: ast.AST) -> str:
    """``node``'s text with every dtype name (``tl.float64``, ``torch.float32``…) made the same."""
    return ast.unparse(DtypeBlind().visit(copy.deepcopy(node)))


def picks_dtype(branch: ast.If | ast.IfExp, flag: str) -> bool:
    """``if flag: A else: B`` where A and B differ in dtype names alone (and do differ)."""
    test = branch.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if not (isinstance(test, ast.Name) and test.id == flag):
        return False
    if isinstance(branch, ast.IfExp):
        arms: tuple[ast.AST, ast.AST] = (branch.body, branch.orelse)
    else:
        arms = (ast.Module(branch.body, []), ast.Module(branch.orelse, []))
    return dtype_blind(arms[0]) == dtype_blind(arms[1]) and ast.unparse(arms[0]) != ast.unparse(arms[1])


def precision_only(func: ast.FunctionDef, flag: str) -> bool:
    """Every read of ``flag`` in ``func`` is the test of a branch that picks a dtype, and there is one."""
    return any(reads(func, flag)) and not other_uses(func, flag)


def reads(func: ast.FunctionDef, flag: str) -> list[ast.Name]:
    return [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == flag and isinstance(n.ctx, ast.Load)]


def other_uses(func: ast.FunctionDef, flag: str) -> list[ast.Name]:
    """The reads of ``flag`` that are not the test of a branch picking a dtype, first line first."""
    tests = {id(n) for b in ast.walk(func) if isinstance(b, ast.If | ast.IfExp) and picks_dtype(b, flag)
             for n in ast.walk(b.test)}
    return sorted((n for n in reads(func, flag) if id(n) not in tests), key=lambda n: (n.lineno, n.col_offset))


def precision_carried(func: ast.FunctionDef | ast.AsyncFunctionDef, passed: ast.expr) -> ast.Assign | None:
    """Where the caller turns the name it passes as the flag into a dtype it gives its data:
    ``d = float64 if flag else float32`` and a call with ``dtype=d`` in the same function."""
    if not isinstance(passed, ast.Name):
        return None
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.IfExp) and picks_dtype(node.value, passed.id)):
            dtype_name = node.targets[0].id
            if any(isinstance(k, ast.keyword) and k.arg == "dtype" and isinstance(k.value, ast.Name)
                   and k.value.id == dtype_name for k in ast.walk(func)):
                return node
    return None


def bindings(src: Source, impl_name: str) -> Iterator[tuple[str, ast.Assign]]:
    """Each name the stand-in's module binds to it at top level, with the binding: ``name = impl_name`` or
    ``name = Wrapper(impl_name)``."""
    for node in src.tree.body:
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        if isinstance(value, ast.Call) and len(value.args) == 1:
            value = value.args[0]
        if isinstance(value, ast.Name) and value.id == impl_name:
            yield from ((t.id, node) for t in node.targets if isinstance(t, ast.Name))


def binding_of(src: Source, kernel_name: str, impl_name: str) -> ast.Assign | None:
    """``kernel_name = impl_name`` or ``kernel_name = Wrapper(impl_name)`` at the top of the stand-in's module."""
    return next((node for name, node in bindings(src, impl_name) if name == kernel_name), None)


def substitution(ctx: RepairContext, kernel_name: str) -> src_tools.GrepHit | None:
    """Where the library assigns the stand-in in place of the kernel: ``<module>.<kernel_name> = …``."""
    pattern = rf"^\s*[\w.]+\.{re.escape(kernel_name)}\s*=(?!=)"
    for package in ctx.library_packages:
        try:
            root = src_tools.module_path(ctx.host, ctx.python, package).rsplit("/", 1)[0]
            hits = src_tools.grep(ctx.host, root, pattern, max_hits=5, python=ctx.python)
        except MedicError:
            continue
        if hits:
            return hits[0]
    return None


def takes_more(func: ast.FunctionDef) -> bool:
    """Whether ``func`` takes ``*args``/``**kwargs`` or keyword-only parameters (then it is not this fault, or the
    new parameter has no single place to go)."""
    return bool(func.args.vararg or func.args.kwarg or func.args.kwonlyargs)


def add_parameter(src: Source, func: ast.FunctionDef, param: str) -> str | None:
    """``func``'s text with ``param`` after its last parameter, in the layout its parameters already have."""
    positional = [*func.args.posonlyargs, *func.args.args]
    if not positional:
        return None
    last = positional[-1]
    default = func.args.defaults[-1] if func.args.defaults else None
    anchor: ast.AST = default if default is not None else last
    sep = ", " if last.lineno == func.lineno else ",\n" + src.indent_of(last.lineno)
    at = src.end(anchor)
    return replace_span(src.text, at, at, sep + param)
