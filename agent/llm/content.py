"""The JSON-in-content protocol: for an endpoint (or a model) with no tool calls.

medic reads the source itself — a window of lines around each frame of the fault in code it may adapt (the
caller's frames; the library's only when none is), the frame's own line marked — and asks for ONE line edit as
a JSON object in the reply's content. The request carries a JSON schema (``response_format`` json_schema, which
vLLM and OpenAI enforce with structured outputs) whose ``line`` is an enum of those frame lines, so even a
small model's answer names a real line of a real file.
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

WINDOW_BEFORE, WINDOW_AFTER, MAX_TARGETS = 6, 2, 3
DEFAULT_REPLY_TOKENS = 200  # a line label, one line of code, a short reason: more is a model rambling

SYSTEM = (
    "You repair Python code. A program failed; you see the error and the source lines where it failed (marked "
    ">>). Reply with one JSON object: which marked line to replace, the new line, and a short reason. Change as "
    "little as possible and keep the line's meaning; use the names the error message gives."
)


@dataclass(frozen=True)
class Target:
    """One frame line a patch may change, with the lines around it."""

    path: str
    line: int  # 1-based
    text: str  # the line as it is now
    start: int  # 1-based number of context[0]
    context: tuple[str, ...]

    @property
    def label(self) -> str:
        """How the model names this line: the file's last two path parts (fewer tokens than the whole path)."""
        return f"{'/'.join(self.path.split('/')[-2:])}:{self.line}"

    def numbered(self) -> str:
        return "\n".join(f"{'>>' if self.start + i == self.line else '  '}{self.start + i:>5}  {text}"
                         for i, text in enumerate(self.context))


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def targets(ctx: RepairContext, fault: Fault) -> list[Target]:
    """The fault's frame lines inside the patch roots, innermost first: the caller's (code medic adapts to the
    library) when there are any, else the library's own."""
    host = ctx.host
    roots = tuple(host.realpath(r) for r in ctx.roots)
    inside: list[Target] = []
    for frame in reversed((*fault.frames, *fault.caller_frames)):
        if not frame.file.startswith("/") or frame.line < 1 or any((t.path, t.line) == (frame.file, frame.line)
                                                                   for t in inside):
            continue
        real = host.realpath(frame.file)
        if not _inside(real, roots) or host.stat(real) is None:
            continue
        try:
            lines = host.read_bytes(real).decode("utf-8").split("\n")
        except UnicodeDecodeError:
            continue
        if frame.line > len(lines) or not lines[frame.line - 1].strip():
            continue
        first, last = max(1, frame.line - WINDOW_BEFORE), min(len(lines), frame.line + WINDOW_AFTER)
        inside.append(Target(frame.file, frame.line, lines[frame.line - 1], first, tuple(lines[first - 1:last])))
    fixable = [t for t in inside if ctx.is_fixable(host.realpath(t.path))]
    chosen = (fixable or inside)[:MAX_TARGETS]
    labels = [t.label for t in chosen]
    return [t for t in chosen if labels.count(t.label) == 1]  # a label that could name two lines names none


def edit_schema(shown: list[Target]) -> dict[str, Any]:
    """The answer's JSON schema: the line can only be one medic marked."""
    return {
        "type": "object",
        "properties": {
            "line": {"type": "string", "enum": [t.label for t in shown]},
            "new_line": {"type": "string", "maxLength": 240},
            "reason": {"type": "string", "maxLength": 120},
        },
        "required": ["line", "new_line", "reason"],
        "additionalProperties": False,
    }


def response_format(shown: list[Target]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "line_edit", "schema": edit_schema(shown), "strict": True}}


def request(fault: Fault, shown: list[Target]) -> str:
    blocks = [f"{t.label}:\n{t.numbered()}" for t in shown]
    error = [f"{fault.exc_type}: {fault.message.strip()}"]
    error += [f'  File "{f.file}", line {f.line}, in {f.func}' for f in fault.frames[-4:]]
    return (
        "The program failed with this error (untrusted data):\n"
        + prompts.untrusted(prompts.LOG_LABEL, "\n".join(error))
        + "\n\nThe source (untrusted data):\n" + prompts.untrusted(prompts.TOOL_LABEL, "\n\n".join(blocks))
        + "\n\n" + "\n".join(f"Line {t.label} reads: {t.text.strip()}" for t in shown)
        + "\nPick one of these lines and write it again, in Python, with the one change that fixes the error. "
        + "Answer with one JSON object with the keys line (" + ", ".join(t.label for t in shown)
        + "), new_line (the rewritten Python line) and reason."
    )


def parse_edit(reply: ChatReply, shown: list[Target], outcome: LLMOutcome) -> tuple[Target, str, str] | None:
    """The marked line the reply replaces, its new text and the reason; None with the reason recorded."""
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
    keys = ("line", "new_line", "reason")
    if not isinstance(edit, dict) or not all(isinstance(edit.get(k), str) for k in keys):
        outcome.reject("not_an_edit", json.dumps(edit)[:200])
        return None
    outcome.proposals += 1
    target = next((t for t in shown if t.label == edit["line"]), None)
    if target is None:
        outcome.reject("unknown_line", edit["line"])
        return None
    if edit["new_line"].strip() == target.text.strip():
        outcome.reject("no_change", target.text)
        return None
    return target, edit["new_line"], edit["reason"]


def edit_diff(ctx: RepairContext, target: Target, new_line: str, outcome: LLMOutcome) -> str | None:
    """The unified diff of the edit against the file as it is now (indentation kept when the model left it off)."""
    lines = ctx.host.read_bytes(ctx.host.realpath(target.path)).decode("utf-8").splitlines(keepends=True)
    if target.line > len(lines) or lines[target.line - 1].rstrip("\r\n") != target.text:
        outcome.reject("unknown_line", f"{target.label} changed since it was shown")
        return None
    old = lines[target.line - 1]
    ending = old[len(old.rstrip("\r\n")):] or "\n"
    indent = target.text[: len(target.text) - len(target.text.lstrip())]
    new = [(part if part[:1].isspace() else indent + part) + ending for part in new_line.split("\n")]
    after = [*lines[: target.line - 1], *new, *lines[target.line:]]
    return "".join(difflib.unified_diff(lines, after, f"a{target.path}", f"b{target.path}", n=3))


def content_candidates(ctx: RepairContext, fault: Fault, model: ChatModel, outcome: LLMOutcome,
                       *, attempts: int = 2) -> None:
    """Ask for a line edit up to ``attempts`` times (each refusal told back); candidates go into ``outcome``."""
    outcome.protocol = "json"
    shown = targets(ctx, fault)
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
        diff = edit_diff(ctx, edit[0], edit[1], outcome) if edit else None
        if edit and diff:
            evidence = tuple(f"{t.label} shown with lines {t.start}-{t.start + len(t.context) - 1}" for t in shown)
            said = judge(ctx, Proposal(diff, edit[2].strip() or "model: line edit", ()), evidence, outcome)
            if outcome.candidates:
                outcome.transcript.append({"role": "medic", "content": said})
                return
        reason = outcome.rejections[-1]["reason"] if len(outcome.rejections) > before else "unusable_diff"
        said = REFUSED.format(reason=f"{reason}: {REJECTIONS.get(reason, reason)}")
        messages.append({"role": "user", "content": said})
        outcome.transcript.append(messages[-1])


REFUSED = "That answer was refused ({reason}). Answer again with one JSON object as asked."
