"""What medic makes of a model's proposal, whichever way it came (a tool call or JSON in the content).

A diff becomes a ``Candidate`` only when every file resolves (symlinks and ``..`` included) inside ``ctx.roots``,
the hunks apply with zero fuzz to the file as it is on the host now, and a patched .py file compiles. Nothing
is written here: the caller applies the candidate through the one patch path (approve, apply, verify). Every
answer medic cannot use is recorded with a NAMED reason (``REJECTIONS``), so the trace says what went wrong.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from agent.llm import prompts
from agent.llm.tools import Proposal
from agent.repair.context import candidate, module_of
from agent.repair.types import Candidate, RepairContext
from tools import pysyntax
from tools.errors import OutsideRoots, PatchDoesNotCompile, PatchError, StaleContext
from tools.patches import apply_hunks, parse_diff

# every reason an answer is turned down, as the trace names it
REJECTIONS = {
    "not_json": "the content is not one JSON object",
    "not_an_edit": "the JSON does not have the fields the schema asks for",
    "truncated": "the reply hit the token limit before it ended",
    "empty": "the reply has neither content nor a tool call",
    "no_tool_call": "the reply is prose where a tool call was asked for",
    "malformed_call": "a tool call with an unknown name or arguments that do not fit its schema",
    "unknown_file": "the file is not one medic showed",
    "unknown_line": "the line to replace is not in the file as it is now",
    "no_change": "the replacement is the line itself",
    "outside_roots": "a file outside the patch roots",
    "does_not_apply": "the diff's context does not match the file",
    "does_not_compile": "the patched file does not compile",
    "unusable_diff": "the diff does not parse or names a file that is not there",
}


@dataclass
class LLMOutcome:
    candidates: list[Candidate] = field(default_factory=list)
    protocol: str = ""  # "tools" or "json": how the model answered
    protocol_note: str = ""  # why json, when the endpoint refused tools (its own words)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    malformed_calls: int = 0
    proposals: int = 0  # answers that named an edit (a diff or a JSON edit), usable or not
    refused_patches: int = 0  # diffs that named a file outside ctx.roots
    unusable_patches: int = 0  # diffs that did not parse, did not apply, or did not compile
    rejections: list[dict[str, str]] = field(default_factory=list)  # {"reason": a REJECTIONS key, "detail": ...}
    transcript: list[dict[str, Any]] = field(default_factory=list)

    def reject(self, reason: str, detail: str) -> None:
        assert reason in REJECTIONS, reason
        self.rejections.append({"reason": reason, "detail": detail[:300]})


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
                pysyntax.check_compiles(new_text, path)
            except SyntaxError as exc:
                raise PatchDoesNotCompile(
                    f"the patched {path} does not compile (line {exc.lineno}: {exc.msg})"
                ) from exc
        edits[path] = new_text
    # candidate() adds compile and import checks for every file; keep only the model's other checks.
    defaults = {("compile", p) for p in edits} | {("import", module_of(ctx, p)) for p in edits}
    extra = [c for c in proposal.checks if (c.kind, c.target) not in defaults]
    return candidate(
        ctx, edits, origin="llm", rationale=proposal.rationale, evidence=evidence, extra_checks=extra
    )


def judge(ctx: RepairContext, proposal: Proposal, evidence: tuple[str, ...], outcome: LLMOutcome) -> str:
    """Turn a proposal into a candidate (recorded in ``outcome``); what to say to the model about it."""
    roots = ", ".join(ctx.roots)
    try:
        accepted = candidate_from_proposal(ctx, proposal, evidence)
    except OutsideRoots as exc:
        outcome.refused_patches += 1
        outcome.reject("outside_roots", str(exc))
        return prompts.PATCH_REFUSED_OUTSIDE_ROOTS.format(reason=str(exc), roots=roots)
    except (PatchError, UnicodeDecodeError) as exc:
        outcome.unusable_patches += 1
        reason = ("does_not_apply" if isinstance(exc, StaleContext) else
                  "does_not_compile" if isinstance(exc, PatchDoesNotCompile) else "unusable_diff")
        outcome.reject(reason, str(exc))
        return prompts.PATCH_NOT_USABLE.format(reason=str(exc))
    outcome.candidates.append(accepted)
    files = ", ".join(f.path for f in accepted.patch.files)
    return prompts.PATCH_ACCEPTED.format(files=files, patch_id=accepted.patch.id)
