"""The installed distribution of a package's file, and its later final releases (the registry's upload times):
where a repair reads the package's own later word (library_history, next_release, next_stand_in)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.repair.context import module_of
from agent.repair.derived_history import finals, version_of
from agent.repair.derived_platform import distribution_of
from agent.repair.types import RepairContext
from tools.errors import SourceError
from tools.history import upload_times
from tools.requirements import declared_ranges


@dataclass(frozen=True)
class Releases:
    """The installed distribution of a library file, and its later final releases, oldest first."""

    dist: str
    installed: str
    rel: str  # the file's path inside the package (``vllm/utils/cpu_triton_utils.py``)
    later: tuple[str, ...]


def later_releases(ctx: RepairContext, path: str, most: int) -> Releases | None:
    """Up to ``most`` final releases after the installed one of the distribution that installed ``path``."""
    module = module_of(ctx, path)
    if not module:
        return None
    package = module.split(".")[0]
    dist = distribution_of(ctx, package) or package
    try:
        said = ctx.versions.get(package) or declared_ranges(ctx.host, ctx.python, dist).version
        times = upload_times(dist)
    except SourceError:
        return None
    mine = version_of(said)
    if mine is None:
        return None
    later = sorted((v for v in finals(times) if (version_of(v) or mine) > mine), key=lambda v: version_of(v) or mine)
    return Releases(dist, said, path[path.rfind(f"/{package}/") + 1:], tuple(later[:most]))
