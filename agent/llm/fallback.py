"""The LLM as the engine's last resort: asked only when no playbook or derived repair has a candidate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.events import EventKind
from agent.llm.chat import ChatModel, LLMConfig
from agent.llm.repair import llm_candidates
from agent.repair.engine import Repair
from agent.repair.types import Candidate, Fault, RepairContext

Recorder = Callable[[EventKind, str, dict[str, Any]], None]


def llm_fallback(settings: dict[str, str], record: Recorder) -> Repair:
    """A Repair backed by an OpenAI-compatible endpoint; usage and the transcript go to the trace."""
    tunables = {k: settings.get(k) for k in ("timeout", "max_reply_tokens", "max_calls", "max_tokens", "protocol",
                                                   "server_log")}
    config = LLMConfig.from_env(base_url=settings.get("base_url"), model=settings.get("model"), **tunables)
    model = ChatModel(config)

    def repair(ctx: RepairContext, fault: Fault) -> list[Candidate]:
        outcome = llm_candidates(ctx, fault, model)
        record("llm", "repair", {
            "endpoint": config.endpoint, "model": config.model, "calls": outcome.calls,
            "prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "protocol": outcome.protocol, "protocol_note": outcome.protocol_note, "proposals": outcome.proposals,
            "candidates": [c.patch.id for c in outcome.candidates], "rejections": outcome.rejections,
            "malformed_calls": outcome.malformed_calls, "refused_patches": outcome.refused_patches,
            "transcript": outcome.transcript,
        })
        return outcome.candidates

    return repair
