"""The tools a repair model may call: read-only source questions (agent/llm/source_tools.py), and
``propose_patch``.

Each tool's schema and model-facing description sit beside its handler (agent/llm/tool_kit.py says how). None runs
a command the model chose, and none writes: ``propose_patch`` only hands the diff back to the repair loop as a
``Proposal``. A call the model got wrong (unknown tool, arguments that are not the JSON object the schema asks for)
comes back as a tool error and is counted in ``malformed_calls``; it never raises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.llm import prompts
from agent.llm.source_tools import SOURCE_TOOLS
from agent.llm.tool_kit import STR, BadArguments, Proposal, Reach, Refused, ToolSpec, arg, tool
from agent.repair.types import Check
from tools.errors import MedicError

MAX_EVIDENCE = 12
CHECK_KINDS = ("compile", "import", "signature_has", "member_exists", "grep")


@dataclass(frozen=True)
class ToolResult:
    name: str
    text: str  # cut to prompts.MAX_TOOL_RESULT_CHARS and fenced, ready for the model
    ok: bool
    proposal: Proposal | None = None


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
def propose_patch(reach: Reach, args: dict[str, Any]) -> Proposal:
    diff, rationale = arg(args, "diff", str), arg(args, "rationale", str).strip()
    raw_checks = args.get("checks", [])
    if not isinstance(raw_checks, list):
        raise BadArguments("checks must be a list of {kind, target, detail} objects")
    if not all(isinstance(c, dict) and c.get("kind") in CHECK_KINDS and c.get("target") for c in raw_checks):
        raise BadArguments(f"each check needs a kind (one of {', '.join(CHECK_KINDS)}) and a target")
    if not diff.strip() or not rationale:
        raise BadArguments("propose_patch needs a non-empty diff and rationale")
    checks = (Check(c["kind"], str(c["target"]), str(c.get("detail") or "")) for c in raw_checks)
    return Proposal(diff, rationale, tuple(checks))


TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in (*SOURCE_TOOLS, propose_patch)}


@dataclass
class ToolBox(Reach):
    """The tools bound to one repair context, with the counters and evidence of one conversation."""

    malformed_calls: int = 0
    refused_reads: int = 0
    evidence: list[str] = field(default_factory=list)

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


def openai_tools() -> list[dict[str, Any]]:
    """The tool list for a chat-completions request."""
    return [spec.openai for spec in TOOLS.values()]
