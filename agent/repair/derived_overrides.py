"""A host's subclass overrides a method of the library's main class and leaves out the step a flag needs.

vLLM 0.20–0.21's CPU runner (``CPUModelRunner(GPUModelRunner)``) overrides ``load_model`` and never tells the model
which auxiliary layers to return, which the GPU runner's ``load_model`` does under ``if
self.use_aux_hidden_state_outputs:``; the flag is on for hidden-state extraction, so the GPU runner's
``_dummy_run``, which the CPU runner inherits, unpacks ``hidden_states, _ = outputs`` from a model that returns one
tensor ("too many values to unpack"). (vLLM 0.22.0 moved the step into a method both runners call.) Read from the
installed code, nothing from the message:
- the failing line of a library class's method stands under ``if self.<flag>:``;
- another frame of the fault runs a subclass of that class, defined in another library module;
- exactly one method the subclass overrides (without ``super()``) is, in the base class, the one that takes the
  flag's step: an ``if self.<flag>:`` block, or a call of a method of the class whose body reads the flag; the
  override neither reads the flag nor makes that call.
The remedy gives the override that step, as the base class wrote it, at the end of its body, with the imports the
step's names need from the base class's module. Like every repair of the library against its host
(agent/repair/derived_platform.py), it edits the library's own files.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from dataclasses import dataclass

from agent.repair.context import candidate, evidence_line, module_of, read_source
from agent.repair.derived_platform import host_frames
from agent.repair.edits import Source, replace_span
from agent.repair.option_choice import innermost_class, self_attr
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext

ORIGIN = "derived:platform:skipped_base_step"
Method = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Step:
    base: Source
    base_class: ast.ClassDef
    method: str
    statement: ast.stmt  # the base method's step: the flag's ``if`` block, or the call of a method reading it
    flag: str


def skipped_base_step(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    frames = [f for f in host_frames(ctx, fault) if not ctx.is_fixable(f.file)]
    for frame in frames:  # innermost first
        base = read_source(ctx, frame.file)
        base_class = innermost_class(base.tree, frame.line) if base else None
        flag = flag_over(base_class, frame.line) if base_class else None
        if base is None or base_class is None or flag is None:
            continue
        for other in frames:
            sub = read_source(ctx, other.file) if other.file != frame.file else None
            sub_class = innermost_class(sub.tree, other.line) if sub else None
            if sub is None or sub_class is None or not subclasses(sub, sub_class, base_class.name, ctx, frame):
                continue
            steps = [s for m in overridden_without(sub_class, base_class, flag)
                     for s in steps_of(base, base_class, m, flag)]
            if len(steps) == 1:  # more than one: no guess which the host's override meant to leave out
                found = remedy(ctx, frame, sub, sub_class, steps[0])
                return [found] if found else []
        return []
    return []


def flag_over(cls: ast.ClassDef, line: int) -> str | None:
    """The ``self.<flag>`` of the innermost ``if`` whose body holds ``line``."""
    guards = [n for n in ast.walk(cls) if isinstance(n, ast.If) and n.body
              and n.body[0].lineno <= line <= (n.body[-1].end_lineno or 0)]
    for guard in sorted(guards, key=lambda n: n.lineno, reverse=True):
        if (flag := self_attr(guard.test)) is not None:
            return flag
    return None


def subclasses(sub: Source, sub_class: ast.ClassDef, base_name: str, ctx: RepairContext, frame: FrameRef) -> bool:
    """``sub_class`` names the base class among its bases, imported from the base class's own module."""
    named = any(isinstance(b, ast.Name) and b.id == base_name for b in sub_class.bases)
    return named and sub.imported_from(base_name) == module_of(ctx, frame.file)


def methods(cls: ast.ClassDef) -> dict[str, Method]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def reads(node: ast.AST, names: set[str]) -> bool:
    """``self.<name>`` (read or called) for one of ``names`` anywhere in ``node``."""
    return any(self_attr(n) in names for n in ast.walk(node) if isinstance(n, ast.Attribute))


def calls_super(method: Method) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == method.name
               and isinstance(n.func.value, ast.Call) and isinstance(n.func.value.func, ast.Name)
               and n.func.value.func.id == "super" for n in ast.walk(method))


def overridden_without(sub_class: ast.ClassDef, base_class: ast.ClassDef, flag: str) -> list[str]:
    """Methods the subclass overrides without ``super()`` and without a word of the flag or its helpers."""
    base = methods(base_class)
    helpers = {name for name, m in base.items() if reads(m, {flag})}
    return [name for name, m in methods(sub_class).items()
            if name in base and name != "__init__" and not calls_super(m) and not reads(m, {flag, *helpers})]


def steps_of(base: Source, base_class: ast.ClassDef, method: str, flag: str) -> list[Step]:
    """The base method's statements that take the flag's step: ``if self.<flag>:`` blocks, and calls (as
    statements of their own) of a method of the class whose body reads the flag."""
    helpers = {name for name, m in methods(base_class).items() if name != method and reads(m, {flag})}
    def takes(node: ast.AST) -> bool:
        if isinstance(node, ast.If):
            return self_attr(node.test) == flag
        return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and self_attr(node.value.func) in helpers
    return [Step(base, base_class, method, node, flag) for node in ast.walk(methods(base_class)[method])
            if isinstance(node, ast.stmt) and takes(node)]


def remedy(ctx: RepairContext, frame: FrameRef, sub: Source, sub_class: ast.ClassDef, step: Step
           ) -> Candidate | None:
    override = methods(sub_class)[step.method]
    imports = needed_imports(step, sub)
    if imports is None:
        return None
    last = override.body[-1]
    indent = sub.indent_of(override.body[0].lineno)
    block = textwrap.indent(textwrap.dedent(whole_lines(step.base, step.statement)), indent)
    if isinstance(last, ast.Return):  # before a closing return
        pos, insert = sub.pos(last.lineno, 0), block + "\n"
    else:  # after the override's last line
        end = last.end_lineno or last.lineno
        pos, insert = (sub.pos(end + 1, 0) if end < len(sub.lines) else len(sub.text)), "\n" + block
    text = replace_span(sub.text, pos, pos, insert)
    if imports:
        anchor = max((n.end_lineno or n.lineno) for n in sub.tree.body if isinstance(n, ast.Import | ast.ImportFrom))
        at_import = Source(sub.path, text).pos(anchor + 1, 0)
        text = replace_span(text, at_import, at_import, "".join(line + "\n" for line in imports))
    base_at = f"{step.base.path}:{step.statement.lineno}"
    why = (f"{frame.file}:{frame.line} runs under `if self.{step.flag}:` in {step.base_class.name}; "
           f"{sub_class.name} ({sub.path}) overrides {step.method}() without super() and without the step "
           f"{step.base_class.name}.{step.method}() takes for that flag ({base_at}): give the override that step, "
           "as the base class wrote it")
    evidence = (evidence_line(frame.file, frame.line, step.base.line(frame.line)),
                evidence_line(step.base.path, step.statement.lineno, step.base.line(step.statement.lineno)),
                evidence_line(sub.path, override.lineno, sub.line(override.lineno)))
    return candidate(ctx, {sub.path: text}, origin=ORIGIN, rationale=why, evidence=evidence)


def whole_lines(src: Source, node: ast.stmt) -> str:
    end = node.end_lineno or node.lineno
    return "".join(src.lines[node.lineno - 1:end])


def needed_imports(step: Step, sub: Source) -> list[str] | None:
    """The import lines the step's free names need in the subclass's module, taken from the base module's own
    imports; None when a name has no import there to copy."""
    bound = {n.id for n in ast.walk(step.statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    free = {n.id for n in ast.walk(step.statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    have = sub.module_names() | set(dir(builtins)) | bound | {"self"}
    lines = []
    for name in sorted(free - have):
        module = step.base.imported_from(name)
        if module is None:
            return None
        lines.append(f"from {module} import {name}")
    return lines
