"""The suite leaves the temp dir as it found it: no socket file that no live process holds (what a stopped vLLM
engine left in /tmp before runs had IPC folders of their own, tools/ipc_dir.py), and no run's IPC folder.

Checked once, by the process that runs the session (the xdist controller, or pytest alone), after every worker has
ended: sockets a live process still holds (another suite's server on a shared machine) are not counted."""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

import pytest

from tools import ipc_dir


def held_sockets() -> set[str]:
    """The socket paths live processes have bound (Linux's /proc/net/unix; empty elsewhere)."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {parts[-1] for parts in (line.split() for line in lines) if len(parts) >= 8 and parts[-1].startswith("/")}


def folders_in_use(prefix: str) -> set[str]:
    """The IPC folders live processes were started with (a variable of their environment names it): the runs of
    another medic on this machine (a bench beside the suite) are theirs, not the suite's leftovers."""
    found: set[str] = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            entries = environ.read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        found.update(value for entry in entries if (value := entry.decode(errors="replace").partition("=")[2])
                     .startswith(prefix))
    return found


def leftovers(root: Path | None = None) -> set[str]:
    """Socket files under the temp dir (top level) that no process holds, and runs' IPC folders no live process
    was started with."""
    root = root or Path(tempfile.gettempdir())
    held = held_sockets() | folders_in_use(str(root / ipc_dir.PREFIX))
    found: set[str] = set()
    for entry in root.iterdir():
        try:
            mode = entry.lstat().st_mode
        except OSError:
            continue  # gone while we looked
        dropped = stat.S_ISSOCK(mode) and str(entry) not in held
        if dropped or (stat.S_ISDIR(mode) and entry.name.startswith(ipc_dir.PREFIX) and str(entry) not in held):
            found.add(str(entry))
    return found


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _is_worker(session.config):
        session.config.stash[_BEFORE] = leftovers()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None or _is_worker(session.config):
        return
    new = sorted(leftovers() - before)
    if new:
        shown = "\n  ".join(new[:10]) + (f"\n  … and {len(new) - 10} more" if len(new) > 10 else "")
        print(f"\nthe suite left {len(new)} socket file(s) or IPC folder(s) in {tempfile.gettempdir()}:\n  {shown}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[set[str]]()
