"""Several real ``medic`` processes on one fresh MEDIC_HOME at once never crash, and none says "database is
locked": while ``medic resume`` (then ``medic approve --yes``) writes a session, other processes keep running
``medic status``, ``medic watch``, ``medic sessions`` and ``medic approve --yes`` on the same home — from before
the checkpoint database exists until the session is verified.

Before: every reader ran LangGraph's SqliteSaver.setup (journal mode, CREATE TABLE, ALTER TABLE) on a
read-write connection each time it looked, and ``medic resume`` died once of ``sqlite3.OperationalError:
database is locked`` inside that setup while a ``medic watch`` read the same session. agent/store.py now opens
the database: WAL and the schema made once by a writer under a file lock, a busy timeout, readers read-only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agent import store
from agent.outcomes import exit_code
from tests.fixtures_fake import REPO, MakeFake, record_figure

MEDIC = str(REPO / ".venv" / "bin" / "medic")
DEADLINE = 150.0  # seconds for the whole session (two launches of a few seconds each, on a loaded machine)
# what a reader may end with: a look (0), a session waiting or stopped as watch saw it, a refused approve (2: the
# session waits for nothing yet); never 1 (a crash) nor internal_error
READER_ENDS = {0, exit_code("bad_input"), exit_code("waiting"), exit_code("stopped")}


class Medics:
    """Real medic processes of this checkout, each one's (args, exit code, stderr) kept."""

    def __init__(self, home: Path) -> None:
        self.env = {**os.environ, "MEDIC_HOME": str(home), "PYTHONPATH": str(REPO)}
        self.done: list[tuple[tuple[str, ...], int, str]] = []
        self.lock = threading.Lock()

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([MEDIC, *args], cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env=self.env, timeout=DEADLINE)
        with self.lock:
            self.done.append((args, proc.returncode, proc.stderr))
        return proc


def poll(medics: Medics, stop: threading.Event, *args: str) -> None:
    while not stop.is_set():
        medics.run(*args)


def test_readers_and_writers_on_one_home_never_crash(make_fake: MakeFake) -> None:
    fake = make_fake(mode="approve", seconds=1.0, session_id="busy")
    db = fake.home / "checkpoints.sqlite"
    assert not db.exists()  # a fresh machine: the readers start first
    medics, stop = Medics(fake.home), threading.Event()
    for look in (("status", "busy", "--json"), ("sessions",)):
        assert medics.run(*look).returncode == 0, medics.done[-1]
    assert not db.exists(), "a reader created the checkpoint database (and so ran its setup)"
    readers = [threading.Thread(target=poll, args=(medics, stop, *args), daemon=True) for args in (
        ("watch", "busy"), ("sessions",), ("approve", "busy", "--yes"))]
    for reader in readers:
        reader.start()
    started = time.monotonic()
    writer = medics.run("resume", "busy")  # starts the saved session; it waits for the approval of its patch
    state = {}
    while time.monotonic() - started < DEADLINE:
        state = json.loads(medics.run("status", "busy", "--json").stdout or "{}")
        if state.get("state") == "ended":
            break
        time.sleep(0.5)
    stop.set()
    for reader in readers:
        reader.join(timeout=DEADLINE)
    locked = [d for d in medics.done if "database is locked" in d[2]]
    crashed = [d for d in medics.done if d[1] in (1, exit_code("internal_error")) or "Traceback" in d[2]]
    approvals = [d for d in medics.done if d[0][0] == "approve" and d[1] == 0]
    record_figure("concurrent medic processes on one home", survived=int(not (locked or crashed)), total=1,
                  processes=len(medics.done), locked=len(locked), crashed=len(crashed))
    assert not locked, locked[:3]
    assert not crashed, crashed[:3]
    assert writer.returncode in (0, exit_code("waiting")), writer.stderr[-2000:]
    assert (state.get("state"), state.get("outcome")) == ("ended", "verified"), state
    assert len(approvals) == 1, [d[:2] for d in medics.done if d[0][0] == "approve"]  # one answer went in
    assert {d[1] for d in medics.done if d[0][0] != "resume"} <= READER_ENDS, sorted({d[1] for d in medics.done})
    assert len(medics.done) >= 10  # the readers did poll while the session ran


def test_a_reader_cannot_write_the_database(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", session_id="ro")
    with store.writer() as saver:  # a writer made it: WAL, and the tables
        assert saver.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with store.reader() as saver, pytest.raises(sqlite3.OperationalError, match="readonly"):
        assert saver is not None
        saver.conn.execute("DELETE FROM checkpoints")
    assert store.read(lambda saver: saver.get_tuple({"configurable": {"thread_id": fake.config.session_id}}),
                      "empty") is None
    db = store.db_path()
    db.unlink()
    assert store.read(lambda saver: "opened", "empty") == "empty" and not db.exists()
