"""The read-only source questions a repair model may ask: lines of a file, a grep, where a symbol lives now, a
signature, call sites, a class's members, the installed versions.

Each goes to tools/source.py or tools/envprobe.py with the repair context's host and target python; none runs a
command the model chose and none writes. A path is read only under the patch roots or the env's site-packages
(``Reach.readable``).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from agent.llm.tool_kit import INT, STR, BadArguments, Reach, arg, dotted_target, tool
from tools import envprobe, source


@tool(
    "view_lines",
    "Show lines start..end (1-based, inclusive, at most 400) of a source file in the target environment, "
    "numbered. Only files under the patch roots or the environment's site-packages can be read.",
    {"path": {**STR, "description": "absolute path"}, "start": INT, "end": INT},
)
def view_lines(reach: Reach, args: dict[str, Any]) -> str:
    path = arg(args, "path", str)
    start, end = arg(args, "start", int), arg(args, "end", int)
    reach.readable(path)
    shown = source.view(reach.ctx.host, path, start, end)
    return f"{shown.path} lines {shown.start}-{shown.end} of {shown.total_lines}:\n{shown.text}"


def _package_root(reach: Reach, package: str) -> str:
    if not re.match(r"^[A-Za-z_][\w.]*$", package):
        raise BadArguments("package must be an importable name such as 'vllm' or 'vllm.v1.worker'")
    path = source.module_path(reach.ctx.host, reach.ctx.python, package, path_extra=reach.path_extra)
    root = posixpath.dirname(path) if path.endswith("/__init__.py") else path
    reach.readable(root)
    return root


@tool(
    "grep",
    "Search the .py files of an installed package (e.g. 'vllm' or 'vllm.v1.core') for a Python regex; "
    "returns path:line: text for each hit (at most 60).",
    {"pattern": STR, "package": STR},
)
def grep(reach: Reach, args: dict[str, Any]) -> str:
    pattern, package = arg(args, "pattern", str), arg(args, "package", str)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise BadArguments(f"pattern is not a Python regex: {exc}") from exc
    root = _package_root(reach, package)
    hits = source.grep(reach.ctx.host, root, pattern, max_hits=60, python=reach.ctx.python)
    return "\n".join(f"{h.path}:{h.lineno}: {h.text}" for h in hits) or f"no match for {pattern!r} in {root}"


@tool(
    "find_symbol",
    "Where a symbol is defined now ('pkg.module:Class.method' or 'pkg.module.function'), following "
    "re-exports and base classes, with its numbered source.",
    {"target": STR},
)
def find_symbol(reach: Reach, args: dict[str, Any]) -> str:
    found = source.find_symbol(reach.ctx.host, reach.ctx.python, dotted_target(args), path_extra=reach.path_extra)
    head = f"{found.kind} {found.module}:{found.name} in {found.path} lines {found.start}-{found.end}"
    numbered = "\n".join(f"{found.start + i:>5}  {line}" for i, line in enumerate(found.source.split("\n")))
    return f"{head}{' (source cut)' if found.truncated else ''}:\n{numbered}"


def _format_signature(sig: source.Signature) -> str:
    marks = {"var_positional": "*", "var_keyword": "**"}
    parts = []
    for p in sig.params:
        text = marks.get(p.kind, "") + p.name
        text += f": {p.annotation_src}" if p.annotation_src else ""
        text += f" = {p.default_src}" if p.has_default else ""
        parts.append(f"{text}  [{p.kind}]")
    returns = f" -> {sig.returns_src}" if sig.returns_src else ""
    through = f"; called through {'; '.join(sig.layers)}" if sig.layers else ""
    unknown = f"; what the call accepts is UNKNOWN ({sig.unknown})" if sig.unknown else ""
    return f"({', '.join(parts)}){returns}  # {sig.path}:{sig.lineno}, from {sig.derived_from}{through}{unknown}"


@tool(
    "signature",
    "The parameters of a function, method or class constructor as a caller sees them, with kinds, "
    "defaults and annotations.",
    {"target": STR},
)
def signature(reach: Reach, args: dict[str, Any]) -> str:
    target = dotted_target(args)
    sig = source.signature(reach.ctx.host, reach.ctx.python, target, path_extra=reach.path_extra)
    return target + _format_signature(sig)


@tool(
    "call_sites",
    "Every call of name(...) or <anything>.name(...) in a package's own code, as path:line: source.",
    {"package": STR, "name": STR},
)
def call_sites(reach: Reach, args: dict[str, Any]) -> str:
    package, name = arg(args, "package", str), arg(args, "name", str)
    if not re.match(r"^[A-Za-z_]\w*$", name):
        raise BadArguments("name must be a bare function or method name")
    _package_root(reach, package)
    ctx = reach.ctx
    sites = source.call_sites(ctx.host, ctx.python, package, name, max_sites=40, path_extra=reach.path_extra)
    lines = [f"{s.path}:{s.lineno}: {s.source_line.strip()}" for s in sites]
    return "\n".join(lines) or f"no call of {name} in {package}"


@tool(
    "class_members",
    "Methods, properties and attributes of a class ('pkg.module:Class'), own ones first, then inherited.",
    {"target": STR},
)
def class_members(reach: Reach, args: dict[str, Any]) -> str:
    members = source.class_members(reach.ctx.host, reach.ctx.python, dotted_target(args), path_extra=reach.path_extra)
    lines = []
    for m in members:
        shape = _format_signature(m.signature) if m.signature else f"  # {m.path}:{m.lineno}"
        lines.append(f"{m.kind} {m.name}{shape}  (from {m.owner})")
    return "\n".join(lines) or "no members found"


@tool(
    "installed_versions",
    "Python and package versions installed in the target environment, with their locations.",
    {},
)
def installed_versions(reach: Reach, args: dict[str, Any]) -> str:
    names = dict.fromkeys((*reach.ctx.fixable_packages, *reach.ctx.library_packages, *envprobe.DEFAULT_PACKAGES))
    report = envprobe.probe_env(reach.ctx.host, reach.ctx.python, tuple(names))
    lines = [f"python {report.python_version} ({report.python})"]
    return "\n".join(lines + [f"{s.name} {s.version} at {s.location}" for s in report.packages.values()])


SOURCE_TOOLS = (view_lines, grep, find_symbol, signature, call_sites, class_members, installed_versions)
