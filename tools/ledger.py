"""The patch ledger on the target host: ``<ledger_dir>/<patch_id>.json`` records each patch and its state, and
``<ledger_dir>/<patch_id>/orig/<sha256_before>`` keeps the original bytes, so a revert needs only the id.

tools/patches.py writes it; everything here goes through Host calls, so an SSH host works the same.
"""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from tools.diffs import Patch
from tools.errors import PatchError
from tools.host import Host


class LedgerFile(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    real_path: str  # where the bytes were written (symlinks resolved)
    sha256_before: str
    sha256_after: str
    original: str  # ledger copy of the bytes before the patch


class LedgerEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    patch_id: str
    state: Literal["applying", "applied", "rolled_back", "reverted"]
    updated_at: str
    files: tuple[LedgerFile, ...]
    patch: Patch


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _entry_path(ledger_dir: str, patch_id: str) -> str:
    return posixpath.join(ledger_dir, f"{patch_id}.json")


def load_entry(host: Host, ledger_dir: str, patch_id: str) -> LedgerEntry | None:
    path = _entry_path(ledger_dir, patch_id)
    if host.stat(path) is None:
        return None
    try:
        return LedgerEntry.model_validate_json(host.read_bytes(path))
    except ValidationError as exc:
        raise PatchError(f"ledger entry {path} is damaged: {exc.errors()[0]['msg']}") from exc


def ledger_entries(host: Host, ledger_dir: str) -> list[LedgerEntry]:
    """Every patch the ledger knows, oldest change first (by the clock: tools/reverts.revert_all orders by content)."""
    if host.stat(ledger_dir) is None:
        return []
    listing = host.run(["ls", "-1A", ledger_dir], timeout=30)
    if not listing.ok:
        raise PatchError(f"cannot list the ledger {ledger_dir}: {listing.stderr.strip()[:200]}")
    ids = [name.removesuffix(".json") for name in listing.stdout.split("\n") if name.endswith(".json")]
    entries = [e for e in (load_entry(host, ledger_dir, i) for i in ids) if e is not None]
    return sorted(entries, key=lambda e: e.updated_at)


def save_entry(host: Host, ledger_dir: str, entry: LedgerEntry, state: str) -> LedgerEntry:
    entry = entry.model_copy(update={"state": state, "updated_at": _now()})
    host.write_bytes_atomic(_entry_path(ledger_dir, entry.patch_id), entry.model_dump_json(indent=2).encode())
    return entry
