"""Which failed shard's log diagnose reads when several failed: one log per shard (or per rank), and the shard
that died first of its own fault is often not the lowest-numbered one. The others then only say "see above", or
were torn down; their root causes explain less (tools/root_cause.py), so the shard whose root cause explains
most is read. Only the end of each log is read: that is where tracebacks are."""

from __future__ import annotations

from collections.abc import Mapping

from agent.launchers.base import LauncherDeps
from tools import logs
from tools.errors import HostError
from tools.root_cause import explanatory_level

TAIL_BYTES = 1024 * 1024
NO_TRACEBACK = 9  # worse than any traceback


def explaining_shard(deps: LauncherDeps, failed_logs: Mapping[int, str]) -> int:
    """Of the failed shards (shard -> its log on the host), the one whose log explains the failure best; ties go
    to the lowest shard."""
    return min(failed_logs, key=lambda shard: (level_of(deps, failed_logs[shard]), shard))


def level_of(deps: LauncherDeps, path: str) -> int:
    try:
        size = deps.host.stat(path)
        data = deps.host.read_bytes(path, max(0, (size.size if size else 0) - TAIL_BYTES), TAIL_BYTES)
    except HostError:
        return NO_TRACEBACK
    root = logs.root_cause(logs.extract_tracebacks(logs.clean_lines(data)))
    return NO_TRACEBACK if root is None else explanatory_level(root)
