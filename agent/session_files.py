"""A session's folder on this machine, ``$MEDIC_HOME/sessions/<id>/``: its config (kept for a resume), its lock
(one medic process per session) and ``failed.json`` (the last run ended in medic's own failure)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.config import SessionConfig, medic_home
from tools.errors import SessionError, UsageError


def session_dir(session_id: str) -> Path:
    return medic_home() / "sessions" / session_id


def save_config(config: SessionConfig) -> None:
    folder = session_dir(config.session_id)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "config.json.tmp"
    # it holds the job's env and arguments as given (a resume needs them): readable by its owner only
    tmp.touch(mode=0o600)
    tmp.chmod(0o600)
    tmp.write_text(config.model_dump_json(indent=1))
    tmp.replace(folder / "config.json")


def load_config(session_id: str) -> SessionConfig:
    path = session_dir(session_id) / "config.json"
    if not path.exists():
        raise SessionError(f"no session {session_id!r} under {medic_home()}: `medic sessions` lists them")
    return SessionConfig.model_validate_json(path.read_text())


@contextlib.contextmanager
def session_lock(session_id: str) -> Iterator[None]:
    """One medic process per session: a second one is refused, not queued."""
    folder = session_dir(session_id)
    folder.mkdir(parents=True, exist_ok=True)
    fh = open(folder / "lock", "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        fh.close()
        raise SessionError(f"session {session_id} is in use by another medic process (lock {folder / 'lock'})") from exc
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


FAILED = "failed.json"  # the last run of the session ended in medic's own failure: what, where (status reads it)


def read_failure(session_id: str) -> dict[str, Any] | None:
    """What failed.json says of the session's last run (None when it did not end in medic's own failure)."""
    try:
        found = json.loads((session_dir(session_id) / FAILED).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def require_new(config: SessionConfig) -> None:
    if (session_dir(config.session_id) / "config.json").exists():
        raise UsageError(f"session {config.session_id} exists: `medic resume {config.session_id}` continues it")
