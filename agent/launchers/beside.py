"""The target's launch started beside the canary's: the load no fix can save runs while the canary finds what it
finds. Where the two share no accelerator (a CPU job: a GPU's memory is the target's alone) and the canary writes
its output apart from the job's (agent/nodes/preflight.py), the launch node starts both (its may_overlap); the
target is the next launch's number, ledgered with a fingerprint of what it runs. The next launch of that number
adopts it only when its fingerprint is the same — the same kind, command, environment and kept patches: nothing
medic changed since it started — and otherwise stops it and starts afresh (agent/launchers/detached.py). A canary
that fails stops it at once: its load is for code that is about to change. The canary runs at a lower CPU
priority than the target."""

from __future__ import annotations

import hashlib
import json
import shlex

from agent.launch_records import LaunchRecord
from agent.state import SessionState
from tools import runs
from tools.host import Host

CANARY_NICE = 10


def fingerprint(kind: str, command: list[str], env: dict[str, str], unset: list[str], patches: list[str]) -> str:
    """What a launch runs, in one word: two launches with the same one run the same code the same way."""
    said = json.dumps([kind, command, sorted(env.items()), sorted(unset), patches])
    return hashlib.sha256(said.encode()).hexdigest()[:16]


def canary_yields(host: Host, canary_dir: str) -> None:
    """The canary's processes at a lower CPU priority than the target's beside them (its process group,
    whose children inherit it): where the two share few cores, the target's load is the session's long pole,
    and a canary slowed by it still answers long before a real load ends. Advisory: a host without renice
    runs the two alike."""
    pid = f"{shlex.quote(canary_dir)}/pid"
    host.run(f"renice -n {CANARY_NICE} -g \"$(cat {pid})\" >/dev/null 2>&1 || true", timeout=30)


def patch_ids(state: SessionState) -> list[str]:
    return [kept["patch"]["id"] for kept in state.get("patches") or []]


def stop_beside(host: Host, record: LaunchRecord | None) -> None:
    """The canary's run failed (or its output did): the target started beside it runs code about to change."""
    folder = record.get("target_beside") if record else None
    if folder:
        runs.stop(host, runs.Run.in_dir(folder))
