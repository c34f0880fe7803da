"""The tools a repair model may call: read-only source questions, and ``propose_patch``.

Each tool's schema and model-facing description sit beside its handler. Handlers go to tools/source.py and
tools/envprobe.py with the RepairContext's host and target python; none runs a command the model chose,
and none writes: ``propose_patch`` only hands the diff back to the repair loop as a ``Proposal``. A call
the model got wrong (unknown tool, arguments that are not the JSON object the schema asks for) comes back
as a tool error and is counted in ``malformed_calls``; it never raises.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.llm import prompts
from agent.repair.types import Check, RepairContext
from tools import envprobe, source
from tools.errors import MedicError

MAX_EVIDENCE = 12
CHECK_KINDS = ("compile", "import", "signature_has", "member_exists", "grep")
_DOTTED = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$")


class BadArguments(Exception):
    """The model's arguments do not fit the tool's schema (counted as a malformed call)."""


class Refused(Exception):
    """A well-formed call medic will not serve, e.g. a path outside what a repair may read."""


@dataclass(frozen=True)
class Proposal:
    diff: str
    rationale: str
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class ToolResult:
    name: str
    text: str  # cut to prompts.MAX_TOOL_RESULT_CHARS and fenced, ready for the model
    ok: bool
    proposal: Proposal | None = None


Handler = Callable[["ToolBox", dict[str, Any]], "str | Proposal"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    openai: dict[str, Any]  # the function tool as a chat-completions request lists it
    handler: Handler


TOOLS: dict[str, ToolSpec] = {}
STR = {"type": "string"}
INT = {"type": "integer", "minimum": 1}


def tool(name: str, description: str, params: dict[str, Any], *optional: str) -> Callable[[Handler], Handler]:
    """Register a handler as tool ``name``: its model-facing description and JSON schema sit on top of it."""
    required = [p for p in params if p not in optional]
    schema = {"type": "object", "properties": params, "required": required, "additionalProperties": False}
    function = {"name": name, "description": description, "parameters": schema}

    def register(handler: Handler) -> Handler:
        TOOLS[name] = ToolSpec(name, {"type": "function", "function": function}, handler)
        return handler

    return register


def _arg(args: dict[str, Any], name: str, kind: type) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadArguments(f"argument {name!r} must be a {kind.__name__}")
    return value


def _target(args: dict[str, Any]) -> str:
    value = str(_arg(args, "target", str)).strip()
    if not _DOTTED.match(value):
        raise BadArguments("target must look like 'pkg.module:Class.method' or 'pkg.module.function'")
    return value


@dataclass
class ToolBox:
    """The tools bound to one repair context, with the counters and evidence of one conversation."""

    ctx: RepairContext
    malformed_calls: int = 0
    refused_reads: int = 0
    evidence: list[str] = field(default_factory=list)

    @property
    def path_extra(self) -> tuple[str, ...]:
        # The env's site-packages are on its sys.path anyway; naming them also finds a job's own folders.
        return tuple(self.ctx.site_packages) + ((self.ctx.workdir,) if self.ctx.workdir else ())

    def readable(self, path: str) -> str:
        """The real path of ``path`` if a repair may read it: under the roots or the env's site-packages."""
        if not posixpath.isabs(path):
            raise Refused(f"{path} is not an absolute path")
        host = self.ctx.host
        real = host.realpath(path)
        allowed = [host.realpath(r) for r in (*self.ctx.roots, *self.ctx.site_packages)]
        if not any(real == a or real.startswith(a.rstrip("/") + "/") for a in allowed):
            raise Refused(f"{path} is outside the folders a repair may read ({', '.join(allowed)})")
        return real

    def run(self, name: str, arguments: str) -> ToolResult:
        spec = TOOLS.get(name)
        label = name if spec else "unknown tool"  # a made-up name is model output: keep it inside the fence
        try:
            if spec is None:
                raise BadArguments(f"there is no tool {name!r}; the tools are {', '.join(TOOLS)}")
            try:
                args = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                raise BadArguments(f"the arguments are not valid JSON ({exc.msg} at char {exc.pos})") from exc
            if not isinstance(args, dict):
                raise BadArguments("the arguments must be a JSON object")
            answer = spec.handler(self, args)
        except BadArguments as exc:
            self.malformed_calls += 1
            return self._error(label, f"malformed call: {exc}")
        except Refused as exc:
            self.refused_reads += 1
            return self._error(label, f"refused: {exc}")
        except MedicError as exc:  # SourceError, HostError...: a fair question the env could not answer
            return self._error(label, str(exc))
        if isinstance(answer, Proposal):
            return ToolResult(name, "", ok=True, proposal=answer)
        self._remember(name, args, answer)
        return ToolResult(name, prompts.tool_result(name, answer), ok=True)

    def _error(self, name: str, reason: str) -> ToolResult:
        return ToolResult(name, prompts.tool_result(name, prompts.TOOL_ERROR.format(reason=reason)), ok=False)

    def _remember(self, name: str, args: dict[str, Any], answer: str) -> None:
        first = next((line.strip() for line in answer.splitlines() if line.strip()), "")
        call = ", ".join(f"{k}={v!r}" for k, v in args.items())
        self.evidence = [*self.evidence, f"{name}({call}): {first}"[:300]][-MAX_EVIDENCE:]


@tool(
    "view_lines",
    "Show lines start..end (1-based, inclusive, at most 400) of a source file in the target environment, "
    "numbered. Only files under the patch roots or the environment's site-packages can be read.",
    {"path": {**STR, "description": "absolute path"}, "start": INT, "end": INT},
)
def _view_lines(box: ToolBox, args: dict[str, Any]) -> str:
    path = _arg(args, "path", str)
    start, end = _arg(args, "start", int), _arg(args, "end", int)
    box.readable(path)
    shown = source.view(box.ctx.host, path, start, end)
    return f"{shown.path} lines {shown.start}-{shown.end} of {shown.total_lines}:\n{shown.text}"


def _package_root(box: ToolBox, package: str) -> str:
    if not re.match(r"^[A-Za-z_][\w.]*$", package):
        raise BadArguments("package must be an importable name such as 'vllm' or 'vllm.v1.worker'")
    path = source.module_path(box.ctx.host, box.ctx.python, package, path_extra=box.path_extra)
    root = posixpath.dirname(path) if path.endswith("/__init__.py") else path
    box.readable(root)
    return root


@tool(
    "grep",
    "Search the .py files of an installed package (e.g. 'vllm' or 'vllm.v1.core') for a Python regex; "
    "returns path:line: text for each hit (at most 60).",
    {"pattern": STR, "package": STR},
)
def _grep(box: ToolBox, args: dict[str, Any]) -> str:
    pattern, package = _arg(args, "pattern", str), _arg(args, "package", str)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise BadArguments(f"pattern is not a Python regex: {exc}") from exc
    root = _package_root(box, package)
    hits = source.grep(box.ctx.host, root, pattern, max_hits=60, python=box.ctx.python)
    return "\n".join(f"{h.path}:{h.lineno}: {h.text}" for h in hits) or f"no match for {pattern!r} in {root}"


@tool(
    "find_symbol",
    "Where a symbol is defined now ('pkg.module:Class.method' or 'pkg.module.function'), following "
    "re-exports and base classes, with its numbered source.",
    {"target": STR},
)
def _find_symbol(box: ToolBox, args: dict[str, Any]) -> str:
    found = source.find_symbol(box.ctx.host, box.ctx.python, _target(args), path_extra=box.path_extra)
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
def _signature(box: ToolBox, args: dict[str, Any]) -> str:
    target = _target(args)
    sig = source.signature(box.ctx.host, box.ctx.python, target, path_extra=box.path_extra)
    return target + _format_signature(sig)


@tool(
    "call_sites",
    "Every call of name(...) or <anything>.name(...) in a package's own code, as path:line: source.",
    {"package": STR, "name": STR},
)
def _call_sites(box: ToolBox, args: dict[str, Any]) -> str:
    package, name = _arg(args, "package", str), _arg(args, "name", str)
    if not re.match(r"^[A-Za-z_]\w*$", name):
        raise BadArguments("name must be a bare function or method name")
    _package_root(box, package)
    ctx = box.ctx
    sites = source.call_sites(ctx.host, ctx.python, package, name, max_sites=40, path_extra=box.path_extra)
    lines = [f"{s.path}:{s.lineno}: {s.source_line.strip()}" for s in sites]
    return "\n".join(lines) or f"no call of {name} in {package}"


@tool(
    "class_members",
    "Methods, properties and attributes of a class ('pkg.module:Class'), own ones first, then inherited.",
    {"target": STR},
)
def _class_members(box: ToolBox, args: dict[str, Any]) -> str:
    members = source.class_members(box.ctx.host, box.ctx.python, _target(args), path_extra=box.path_extra)
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
def _installed_versions(box: ToolBox, args: dict[str, Any]) -> str:
    names = dict.fromkeys((*box.ctx.fixable_packages, *box.ctx.library_packages, *envprobe.DEFAULT_PACKAGES))
    report = envprobe.probe_env(box.ctx.host, box.ctx.python, tuple(names))
    lines = [f"python {report.python_version} ({report.python})"]
    return "\n".join(lines + [f"{s.name} {s.version} at {s.location}" for s in report.packages.values()])


CHECK_PARAMS = {"kind": {"type": "string", "enum": list(CHECK_KINDS)}, "target": STR, "detail": STR}
CHECK_SCHEMA = {"type": "object", "properties": CHECK_PARAMS, "required": ["kind", "target"]}


@tool(
    "propose_patch",
    "Propose the fix: ONE unified diff whose --- / +++ headers name absolute paths under the patch "
    "roots, with context lines copied exactly from the current file. Nothing is written now: "
    "medic checks the patch first. Call it once, at the end.",
    {
        "diff": {**STR, "description": "unified diff, absolute paths"},
        "rationale": {**STR, "description": "one or two sentences: the drift and why this fixes it"},
        "checks": {"type": "array", "items": CHECK_SCHEMA, "description": "extra checks that prove it"},
    },
    "checks",
)
def _propose_patch(box: ToolBox, args: dict[str, Any]) -> Proposal:
    diff, rationale = _arg(args, "diff", str), _arg(args, "rationale", str).strip()
    raw_checks = args.get("checks", [])
    if not isinstance(raw_checks, list):
        raise BadArguments("checks must be a list of {kind, target, detail} objects")
    if not all(isinstance(c, dict) and c.get("kind") in CHECK_KINDS and c.get("target") for c in raw_checks):
        raise BadArguments(f"each check needs a kind (one of {', '.join(CHECK_KINDS)}) and a target")
    if not diff.strip() or not rationale:
        raise BadArguments("propose_patch needs a non-empty diff and rationale")
    checks = (Check(c["kind"], str(c["target"]), str(c.get("detail") or "")) for c in raw_checks)
    return Proposal(diff, rationale, tuple(checks))


def openai_tools() -> list[dict[str, Any]]:
    """The tool list for a chat-completions request."""
    return [spec.openai for spec in TOOLS.values()]
