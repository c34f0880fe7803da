"""The model as the last repair: at most one candidate patch, by tool calls or by JSON in the content.

With tools, the model reads the installed source with agent/llm/tools.py and proposes one unified diff; with
JSON (agent/llm/content.py: an endpoint that refuses tools, or ``protocol: json``), medic shows the source and
the model names one line edit. Either way the diff goes to agent/llm/judge.py before it becomes a
``Candidate``; nothing is written here. The whole conversation is returned so the session trace can keep it.
"""

from __future__ import annotations

from typing import Any

from agent.llm import prompts
from agent.llm.chat import ChatModel, RequestRejected
from agent.llm.content import content_candidates
from agent.llm.judge import LLMOutcome, candidate_from_proposal, judge
from agent.llm.tools import ToolBox, openai_tools
from agent.repair.types import Fault, RepairContext

__all__ = ["LLMOutcome", "candidate_from_proposal", "llm_candidates"]


def llm_candidates(ctx: RepairContext, fault: Fault, model: ChatModel, *, max_turns: int = 12) -> LLMOutcome:
    """Ask ``model`` for a fix of ``fault``; ``LLMError`` if the endpoint fails or a budget is spent."""
    outcome = LLMOutcome()
    calls_before = model.calls
    prompt_before, completion_before = model.prompt_tokens, model.completion_tokens
    try:
        if model.config.protocol == "json" or model.tools_refused:
            outcome.protocol_note = model.tools_refused
            content_candidates(ctx, fault, model, outcome)
            return outcome
        try:
            _tool_loop(ctx, fault, model, outcome, max_turns)
        except RequestRejected as exc:
            # the endpoint refused the tool request itself, in its own words: ask for JSON in the content instead
            if model.config.protocol != "auto" or model.calls - calls_before != 1:
                raise
            model.tools_refused = outcome.protocol_note = f"tools refused: {exc.detail or exc}"  # for the session
            outcome.transcript.append({"role": "medic", "content": outcome.protocol_note})
            content_candidates(ctx, fault, model, outcome)
    finally:
        outcome.calls = model.calls - calls_before
        outcome.prompt_tokens = model.prompt_tokens - prompt_before
        outcome.completion_tokens = model.completion_tokens - completion_before
    return outcome


def _tool_loop(ctx: RepairContext, fault: Fault, model: ChatModel, outcome: LLMOutcome, max_turns: int) -> None:
    outcome.protocol = "tools"
    box = ToolBox(ctx)
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": prompts.system_prompt(ctx.fixable_packages, ctx.library_packages, ctx.roots),
        },
        {"role": "user", "content": prompts.fault_message(fault, roots=ctx.roots, versions=ctx.versions)},
    ]
    outcome.transcript = messages  # the same list: whatever happens, the caller sees every turn
    tools = openai_tools()
    try:
        for turn in range(max_turns):
            if turn == max_turns - 1 and turn > 0:
                messages.append({"role": "user", "content": prompts.LAST_TURN})
            reply = model.chat(messages, tools)
            messages.append(reply.as_message())
            if not reply.tool_calls:
                outcome.reject("truncated" if reply.finish_reason == "length" else "empty" if not reply.content
                               else "no_tool_call", (reply.content or "")[:200])
                messages.append({"role": "user", "content": prompts.NUDGE_NO_TOOL_CALL})
                continue
            for call in reply.tool_calls:
                malformed_before = box.malformed_calls
                result = box.run(call.name, call.arguments)
                if box.malformed_calls > malformed_before:
                    outcome.reject("malformed_call", f"{call.name}({call.arguments[:160]})")
                text = result.text
                if result.proposal is not None:
                    outcome.proposals += 1
                    if outcome.candidates:  # the rules say one diff; a second one in the same turn is ignored
                        text = prompts.tool_result(call.name, "ignored: a patch was already accepted")
                    else:
                        text = prompts.tool_result(call.name, judge(ctx, result.proposal, tuple(box.evidence),
                                                                    outcome))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            if outcome.candidates:
                break
    finally:
        outcome.malformed_calls = box.malformed_calls
