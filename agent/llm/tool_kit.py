"""How a tool a repair model may call is declared and served: its schema beside its handler, the arguments read
as the schema says, and what a handler may reach.

A tool is a handler under ``@tool(name, description, params)``, which makes it a ``ToolSpec``. A handler gets a
``Reach`` (the repair context, and the one check of what a repair may read) and the model's arguments, and answers
with text or a ``Proposal``. Arguments that do not fit raise ``BadArguments``, a fair question medic will not serve
``Refused``: agent/llm/tools.py turns both into tool errors and counts them; neither reaches the repair loop.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.repair.types import Check, RepairContext

_DOTTED = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$")
STR = {"type": "string"}
INT = {"type": "integer", "minimum": 1}


class BadArguments(Exception):
    """The model's arguments do not fit the tool's schema (counted as a malformed call)."""


class Refused(Exception):
    """A well-formed call medic will not serve, e.g. a path outside what a repair may read."""


@dataclass(frozen=True)
class Proposal:
    diff: str
    rationale: str
    checks: tuple[Check, ...]


@dataclass
class Reach:
    """What a tool's handler may reach: the repair context, and only the files a repair may read."""

    ctx: RepairContext

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


Handler = Callable[[Reach, dict[str, Any]], "str | Proposal"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    openai: dict[str, Any]  # the function tool as a chat-completions request lists it
    handler: Handler


def tool(name: str, description: str, params: dict[str, Any], *optional: str) -> Callable[[Handler], ToolSpec]:
    """Make a handler tool ``name``: its model-facing description and JSON schema sit on top of it."""
    required = [p for p in params if p not in optional]
    schema = {"type": "object", "properties": params, "required": required, "additionalProperties": False}
    function = {"name": name, "description": description, "parameters": schema}

    def spec(handler: Handler) -> ToolSpec:
        return ToolSpec(name, {"type": "function", "function": function}, handler)

    return spec


def arg(args: dict[str, Any], name: str, kind: type) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadArguments(f"argument {name!r} must be a {kind.__name__}")
    return value


def dotted_target(args: dict[str, Any]) -> str:
    value = str(arg(args, "target", str)).strip()
    if not _DOTTED.match(value):
        raise BadArguments("target must look like 'pkg.module:Class.method' or 'pkg.module.function'")
    return value
