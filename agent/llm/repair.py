"""The model as the last repair: a tool-calling loop that ends in at most one candidate patch.

The model reads the installed source with agent/llm/tools.py and proposes one unified diff. Here the diff
is checked before it becomes a ``Candidate``: every file must resolve (symlinks and ``..`` included) inside
``ctx.roots``, the hunks must apply with zero fuzz to the file as it is on the host now, and a patched .py
file must compile. Nothing is written: the caller applies the candidate with tools.patches.apply_patch
after its own checks. The whole conversation is returned so the session trace can keep it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from agent.llm import prompts
from agent.llm.chat import ChatModel
from agent.llm.tools import Proposal, ToolBox, openai_tools
from agent.repair.context import candidate, module_of
from agent.repair.types import Candidate, Fault, RepairContext
from tools.errors import OutsideRoots, PatchError
from tools.patches import apply_hunks, parse_diff


@dataclass
class LLMOutcome:
    candidates: list[Candidate] = field(default_factory=list)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    malformed_calls: int = 0
    refused_patches: int = 0  # diffs that named a file outside ctx.roots
    unusable_patches: int = 0  # diffs that did not parse, did not apply, or did not compile
    transcript: list[dict[str, Any]] = field(default_factory=list)


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def candidate_from_proposal(ctx: RepairContext, proposal: Proposal, evidence: tuple[str, ...]) -> Candidate:
    """A ``Candidate`` pinned to the files as they are now; ``OutsideRoots`` / ``PatchError`` if unusable."""
    host = ctx.host
    real_roots = [host.realpath(r) for r in ctx.roots]
    file_diffs = parse_diff(proposal.diff)
    edits: dict[str, str] = {}
    for path, file_diff in file_diffs.items():
        if not posixpath.isabs(path):
            raise PatchError(f"{path} is not an absolute path; name files by their absolute path on the host")
        real = host.realpath(path)
        if not _inside(real, real_roots):
            raise OutsideRoots(f"{path} resolves to {real}, outside the patch roots")
        if host.stat(real) is None:
            raise PatchError(f"{path} does not exist on {host.name}")
        current = host.read_bytes(real).decode("utf-8", errors="strict")
        new_text = apply_hunks(current, file_diff)  # StaleContext if the context moved
        if path.endswith(".py"):
            try:
                compile(new_text, path, "exec", dont_inherit=True)
            except SyntaxError as exc:
                raise PatchError(
                    f"the patched {path} does not compile (line {exc.lineno}: {exc.msg})"
                ) from exc
        edits[path] = new_text
    # candidate() adds compile and import checks for every file; keep only the model's other checks.
    defaults = {("compile", p) for p in edits} | {("import", module_of(ctx, p)) for p in edits}
    extra = [c for c in proposal.checks if (c.kind, c.target) not in defaults]
    return candidate(
        ctx, edits, origin="llm", rationale=proposal.rationale, evidence=evidence, extra_checks=extra
    )


def _judge(ctx: RepairContext, proposal: Proposal, box: ToolBox, outcome: LLMOutcome) -> str:
    """Turn a proposal into a candidate (recorded in ``outcome``) and say to the model what happened."""
    roots = ", ".join(ctx.roots)
    try:
        accepted = candidate_from_proposal(ctx, proposal, tuple(box.evidence))
    except OutsideRoots as exc:
        outcome.refused_patches += 1
        return prompts.PATCH_REFUSED_OUTSIDE_ROOTS.format(reason=str(exc), roots=roots)
    except (PatchError, UnicodeDecodeError) as exc:
        outcome.unusable_patches += 1
        return prompts.PATCH_NOT_USABLE.format(reason=str(exc))
    outcome.candidates.append(accepted)
    files = ", ".join(f.path for f in accepted.patch.files)
    return prompts.PATCH_ACCEPTED.format(files=files, patch_id=accepted.patch.id)


def llm_candidates(ctx: RepairContext, fault: Fault, model: ChatModel, *, max_turns: int = 12) -> LLMOutcome:
    """Ask ``model`` for a fix of ``fault``; ``LLMError`` if the endpoint fails or a budget is spent."""
    box = ToolBox(ctx)
    outcome = LLMOutcome()
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": prompts.system_prompt(ctx.fixable_packages, ctx.library_packages, ctx.roots),
        },
        {"role": "user", "content": prompts.fault_message(fault, roots=ctx.roots, versions=ctx.versions)},
    ]
    outcome.transcript = messages  # the same list: whatever happens, the caller sees every turn
    calls_before = model.calls
    prompt_before, completion_before = model.prompt_tokens, model.completion_tokens
    tools = openai_tools()
    try:
        for turn in range(max_turns):
            if turn == max_turns - 1 and turn > 0:
                messages.append({"role": "user", "content": prompts.LAST_TURN})
            reply = model.chat(messages, tools)
            messages.append(reply.as_message())
            if not reply.tool_calls:
                messages.append({"role": "user", "content": prompts.NUDGE_NO_TOOL_CALL})
                continue
            for call in reply.tool_calls:
                result = box.run(call.name, call.arguments)
                text = result.text
                if result.proposal is not None:
                    if outcome.candidates:  # the rules say one diff; a second one in the same turn is ignored
                        text = prompts.tool_result(call.name, "ignored: a patch was already accepted")
                    else:
                        text = prompts.tool_result(call.name, _judge(ctx, result.proposal, box, outcome))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            if outcome.candidates:
                break
    finally:
        outcome.calls = model.calls - calls_before
        outcome.prompt_tokens = model.prompt_tokens - prompt_before
        outcome.completion_tokens = model.completion_tokens - completion_before
        outcome.malformed_calls = box.malformed_calls
    return outcome
