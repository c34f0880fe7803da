"""The JSON-in-content protocol: for an endpoint (or a model) with no tool calls.

medic reads the source itself — a window of lines around each frame of the fault that lies inside the patch
roots — and asks for ONE line edit as a JSON object in the reply's content. The request carries a JSON schema
(``response_format`` json_schema, which vLLM and OpenAI enforce with structured outputs) whose ``file`` and
``old_line`` are enums of what medic showed, so even a small model's answer names a real file and a real line.
The replacement is free text: medic turns the edit into a unified diff and hands it to the same judge as a tool
call's diff (agent/llm/judge.py), then the one patch path applies and verifies it. Anything else — content that
is not JSON, a cut-off reply, a line that is not there, no change — is rejected with a named reason.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from agent.llm import prompts
from agent.llm.chat import ChatModel, ChatReply
from agent.llm.judge import REJECTIONS, LLMOutcome, judge
from agent.llm.tools import Proposal
from agent.repair.types import Fault, RepairContext

WINDOW_BEFORE, WINDOW_AFTER, MAX_WINDOWS = 8, 3, 3
DEFAULT_REPLY_TOKENS = 300  # one line, a short reason: a longer reply is a model rambling

SYSTEM = (
    "You repair Python code. A program failed; you see the error and the source lines around it. Reply with "
    "one JSON object: the file, the one line to replace (copied exactly), its replacement, and a short reason. "
    "Change as little as possible; use the names the error message and the source give."
)


@dataclass(frozen=True)
class Window:
    path: str
    start: int  # 1-based number of lines[0]
    lines: tuple[str, ...]

    def numbered(self) -> str:
        return "\n".join(f"{self.start + i:>5}  {line}" for i, line in enumerate(self.lines))


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def windows(ctx: RepairContext, fault: Fault) -> list[Window]:
    """Source around the fault's frames that a patch may touch, innermost first, one window per file."""
    host, roots = ctx.host, tuple(host_real for host_real in (ctx.host.realpath(r) for r in ctx.roots))
    found: dict[str, Window] = {}
    for frame in reversed((*fault.frames, *fault.caller_frames)):
        if len(found) >= MAX_WINDOWS or not frame.file.startswith("/") or frame.line < 1:
            continue
        real = host.realpath(frame.file)
        if real in found or not _inside(real, roots) or host.stat(real) is None:
            continue
        try:
            text = host.read_bytes(real).decode("utf-8")
        except UnicodeDecodeError:
            continue
        lines = text.split("\n")
        first = max(1, frame.line - WINDOW_BEFORE)
        last = min(len(lines), frame.line + WINDOW_AFTER)
        found[real] = Window(frame.file, first, tuple(lines[first - 1:last]))
    return list(found.values())


def edit_schema(shown: list[Window]) -> dict[str, Any]:
    """The answer's JSON schema: file and old_line can only be what medic showed."""
    old_lines = sorted({line for w in shown for line in w.lines if line.strip()})
    return {
        "type": "object",
        "properties": {
            "file": {"type": "string", "enum": [w.path for w in shown]},
            "old_line": {"type": "string", "enum": old_lines},
            "new_line": {"type": "string", "maxLength": 400},
            "reason": {"type": "string", "maxLength": 300},
        },
        "required": ["file", "old_line", "new_line", "reason"],
        "additionalProperties": False,
    }


def response_format(shown: list[Window]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "line_edit", "schema": edit_schema(shown), "strict": True}}


def request(fault: Fault, shown: list[Window]) -> str:
    blocks = [f"{w.path} (lines {w.start}-{w.start + len(w.lines) - 1}):\n{w.numbered()}" for w in shown]
    error = [f"{fault.exc_type}: {fault.message.strip()}"]
    error += [f'  File "{f.file}", line {f.line}, in {f.func}' for f in fault.frames[-4:]]
    return (
        "The program failed with this error (untrusted data):\n" + prompts.untrusted(prompts.LOG_LABEL, "\n".join(error))
        + "\n\nThe source (untrusted data):\n" + prompts.untrusted(prompts.TOOL_LABEL, "\n\n".join(blocks))
        + '\n\nAnswer with JSON: {"file": ..., "old_line": ..., "new_line": ..., "reason": ...}'
    )


def parse_edit(reply: ChatReply, shown: list[Window], outcome: LLMOutcome) -> dict[str, str] | None:
    """The edit the reply names, or None with the reason recorded."""
    if reply.finish_reason == "length":
        outcome.reject("truncated", (reply.content or "")[-200:])
        return None
    if not (reply.content or "").strip():
        outcome.reject("empty", f"finish_reason={reply.finish_reason}")
        return None
    try:
        edit = json.loads(reply.content or "")
    except json.JSONDecodeError as exc:
        outcome.reject("not_json", f"{exc.msg} at char {exc.pos}: {(reply.content or '')[:160]}")
        return None
    keys = ("file", "old_line", "new_line", "reason")
    if not isinstance(edit, dict) or not all(isinstance(edit.get(k), str) for k in keys):
        outcome.reject("not_an_edit", json.dumps(edit)[:200])
        return None
    outcome.proposals += 1
    if edit["file"] not in {w.path for w in shown}:
        outcome.reject("unknown_file", edit["file"])
        return None
    if edit["new_line"].strip() == edit["old_line"].strip():
        outcome.reject("no_change", edit["old_line"])
        return None
    return {k: edit[k] for k in keys}


def edit_diff(ctx: RepairContext, edit: dict[str, str], shown: list[Window], outcome: LLMOutcome) -> str | None:
    """The unified diff of the edit against the file as it is now (the line nearest the fault, if repeated)."""
    window = next(w for w in shown if w.path == edit["file"])
    text = ctx.host.read_bytes(ctx.host.realpath(window.path)).decode("utf-8")
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line == edit["old_line"]]
    if not hits:
        outcome.reject("unknown_line", edit["old_line"])
        return None
    centre = window.start - 1 + WINDOW_BEFORE
    at = min(hits, key=lambda i: abs(i - centre))
    old = edit["old_line"]
    indent = old[: len(old) - len(old.lstrip())]
    new = [part if part[:1].isspace() else indent + part for part in edit["new_line"].split("\n")]
    after = [*lines[:at], *new, *lines[at + 1:]]
    return "".join(difflib.unified_diff([f"{x}\n" for x in lines], [f"{x}\n" for x in after],
                                        f"a{window.path}", f"b{window.path}", n=3))


def content_candidates(ctx: RepairContext, fault: Fault, model: ChatModel, outcome: LLMOutcome,
                       *, attempts: int = 2) -> None:
    """Ask for a line edit up to ``attempts`` times (each refusal told back); candidates go into ``outcome``."""
    outcome.protocol = "json"
    shown = windows(ctx, fault)
    if not shown:
        outcome.transcript.append({"role": "medic", "content": "no frame of the fault lies inside the patch roots"})
        return
    # what the model is sent; the transcript also keeps each reply's finish_reason and medic's verdicts
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": request(fault, shown)}]
    outcome.transcript.extend(messages)
    limit = model.config.max_reply_tokens or DEFAULT_REPLY_TOKENS
    for _ in range(attempts):
        reply = model.chat(messages, response_format=response_format(shown), max_reply_tokens=limit)
        messages.append(reply.as_message())
        outcome.transcript.append({**reply.as_message(), "finish_reason": reply.finish_reason})
        before = len(outcome.rejections)
        edit = parse_edit(reply, shown, outcome)
        diff = edit_diff(ctx, edit, shown, outcome) if edit else None
        if edit and diff:
            evidence = tuple(f"{w.path}:{w.start}-{w.start + len(w.lines) - 1} shown" for w in shown)
            said = judge(ctx, Proposal(diff, edit["reason"].strip() or "model: line edit", ()), evidence, outcome)
            if outcome.candidates:
                outcome.transcript.append({"role": "medic", "content": said})
                return
        else:
            reason = outcome.rejections[-1]["reason"] if len(outcome.rejections) > before else "unusable"
            said = REFUSED.format(reason=f"{reason}: {REJECTIONS.get(reason, reason)}")
        messages.append({"role": "user", "content": said})
        outcome.transcript.append(messages[-1])


REFUSED = "That answer was refused ({reason}). Answer again with one JSON object as asked."
