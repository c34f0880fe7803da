"""Derived repair from the fixable package's own later releases: the function the failure runs through in the
installed package was changed in a later release, its maintainers' later word on that very code.

The definition of the first later release that changed it (a few releases read at most; agent/repair/
library_history.py reads them and says which names may come along) takes the place of the installed one. It is a
candidate like any other: it compiles, the module imports while the next launch loads, and the run decides.
"""

from __future__ import annotations

from agent.repair.context import candidate, evidence_line, fixable_frames, module_of, read_source
from agent.repair.library_history import later_word
from agent.repair.types import Candidate, Fault, RepairContext

MAX_RELEASES = 4  # the fixable package's later releases read (one file of each) for the first that changed it


def next_release_function(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    if fault.finding is not None:
        return []
    for frame in fixable_frames(ctx, fault):
        module = module_of(ctx, frame.file)
        src = read_source(ctx, frame.file) if module else None
        func = src.enclosing_function(frame.line) if src else None
        if not module or src is None or func is None or func.name != frame.func:
            continue
        package = module.split(".")[0]
        owner = src.enclosing_class(frame.line)
        word = later_word(ctx, frame.file, func, owner.name if owner else None, MAX_RELEASES)
        if word is None:
            continue  # no release read changed it, or its change needs more of that release than one function
        where = f"{owner.name}.{func.name}" if owner else func.name
        came = f", with the import that release gives it: {'; '.join(word.imports)}" if word.imports else ""
        why = (f"the failure runs through {where} in {package} {word.installed}; {package} {word.release}, the first "
               f"later release to change that function, rewrote it: take its definition (every name it uses is in "
               f"the installed module{came})")
        return [candidate(ctx, {frame.file: word.text}, origin="derived:next_release", rationale=why,
                          evidence=[evidence_line(frame.file, frame.line, src.line(frame.line)),
                                    word.evidence(func.name)])]
    return []
