"""The checkpoint database, $MEDIC_HOME/checkpoints.sqlite: the one module that opens it.

Several medic processes use one MEDIC_HOME at once — a ``run``/``resume``/``approve`` that writes a session, and
``watch``/``status``/``sessions`` (and the look ``resume`` and ``approve`` take first) that only read — so:

- WAL journal mode: a reader never blocks the writer, nor the writer a reader. It is set once, by LangGraph's own
  ``SqliteSaver.setup`` (which also makes the tables), run only by a writer, one writer at a time (an fcntl lock on
  ``checkpoints.sqlite.lock``): two starting writers never race on the schema or the journal mode.
- a busy timeout: a writer waits for another (two sessions of one home) instead of failing at once.
- readers open the file read-only (``mode=ro``) and never run setup, so a reader never takes a write lock, never
  checkpoints the WAL on close, and never creates the file: a home with no database yet reads as empty. The few
  SQLITE_BUSY answers the busy handler does not cover (a WAL being recovered or reset) are retried, bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote

if TYPE_CHECKING:  # imported where a checkpoint is opened: the commands that open none never pay for it
    from langgraph.checkpoint.sqlite import SqliteSaver

from agent.config import medic_home

BUSY_TIMEOUT = 30.0  # seconds a writer's statement waits for another process's lock before it fails
READ_TIMEOUT = 5.0  # a reader's (in WAL a reader waits only on a WAL being recovered or reset)
READ_ATTEMPTS = 20  # a reader's retries of a busy answer the busy handler does not wait out
READ_PAUSE = 0.25  # seconds between them
T = TypeVar("T")


def db_path() -> Path:
    return medic_home() / "checkpoints.sqlite"


def transient(err: sqlite3.OperationalError) -> bool:
    """A lock another process holds for a moment (the busy handler's SQLITE_BUSY/LOCKED), not a broken database."""
    text = str(err).lower()
    return "locked" in text or "busy" in text


@contextlib.contextmanager
def writer() -> Iterator[SqliteSaver]:
    """The saver a session's graph writes through; the schema and WAL mode made (once) before it is handed out."""
    path = db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, check_same_thread=False)
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(conn)
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one writer's setup at a time; released when the file closes
            deadline = time.monotonic() + BUSY_TIMEOUT
            while True:
                try:
                    saver.setup()
                    break
                except sqlite3.OperationalError as err:  # a reader mid-recovery: wait it out, bounded
                    if not transient(err) or time.monotonic() > deadline:
                        raise
                    time.sleep(READ_PAUSE)
        yield saver
    finally:
        conn.close()


@contextlib.contextmanager
def reader() -> Iterator[SqliteSaver | None]:
    """A read-only saver (setup never runs), or None when no session has written the database yet."""
    path = db_path()
    if not path.exists():
        yield None
        return
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=READ_TIMEOUT,
                           check_same_thread=False)
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(conn)
        saver.is_setup = True  # the tables are a writer's business; a read-only connection could not make them
        yield saver
    finally:
        conn.close()


def read(look: Callable[[SqliteSaver], T], empty: T) -> T:
    """``look(saver)`` on a read-only saver; ``empty`` when there is no database or no table yet (a writer is
    making them). A transient lock is retried; what is left after the retries is raised as it is."""
    for attempt in range(READ_ATTEMPTS):
        try:
            with reader() as saver:
                return empty if saver is None else look(saver)
        except sqlite3.OperationalError as err:
            if "no such table" in str(err):
                return empty
            if not transient(err) or attempt == READ_ATTEMPTS - 1:
                raise
            time.sleep(READ_PAUSE)
    return empty  # not reached: the last attempt returns or raises
