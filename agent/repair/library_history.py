"""The library's own later word on one of its functions: the first later release of the installed distribution
whose definition of that function differs, read from that release's wheel (tools/history.py: one file, by range
requests for a big wheel), and the installed file with that definition in place of the installed one — only when
every name it uses is one the installed module already has (else it needs more of that release than one function).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from agent.repair.context import read_source
from agent.repair.derived_next_release import Definition, definition, in_place_of
from agent.repair.edits import Source
from agent.repair.releases import later_releases
from agent.repair.types import RepairContext
from tools.errors import SourceError
from tools.history import wheel_member

MAX_RELEASES = 16  # later releases read, one file of each, before saying none changed the function


@dataclass(frozen=True)
class LaterWord:
    text: str  # the installed file with the later definition in place
    dist: str
    release: str
    rel: str  # the file's path inside the package (``vllm/utils/cpu_triton_utils.py``)
    line: int  # where the later release defines it

    def evidence(self, name: str) -> str:
        return f"{self.dist} {self.release} {self.rel}:{self.line}: def {name} (changed)"


def later_word(ctx: RepairContext, path: str, func: Definition, owner: str | None) -> LaterWord | None:
    src = read_source(ctx, path)
    releases = later_releases(ctx, path, MAX_RELEASES)
    if src is None or releases is None:
        return None
    dist, rel = releases.dist, releases.rel
    for release in releases.later:
        try:
            text = wheel_member(dist, release, rel.__eq__)
        except SourceError:
            continue
        newer = Source(rel, text) if text else None
        changed = newer and definition(newer.tree, owner, func.name)
        if not newer or not changed or ast.dump(changed) == ast.dump(func):
            continue
        text_after = in_place_of(src, func, newer, changed)
        return LaterWord(text_after, dist, release, rel, changed.lineno) if text_after is not None else None
    return None
