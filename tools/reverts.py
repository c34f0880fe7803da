"""Reverting patches: one patch byte for byte, one patch with the patches stacked on it, or a whole ledger.

Every revert is all-or-nothing. The order comes from the files, not from clocks (tools/revert_plan.py): a patch
is on top when each of its files holds its ``sha256_after``, and the whole order is checked before the first
write, so a file edited by hand (or a later session's patch) refuses the revert with nothing reverted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tools.diffs import sha256
from tools.errors import MedicError, PatchError, StaleContext
from tools.host import Host
from tools.ledger import LedgerEntry, ledger_entries, load_entry, save_entry
from tools.patches import FileWrite, write_all
from tools.revert_plan import plan_reverts, stack_of


@dataclass(frozen=True)
class RevertResult:
    patch_id: str
    reverted: bool
    already_reverted: bool
    files: tuple[str, ...]


def revert_patch(host: Host, patch_id: str, *, ledger_dir: str) -> RevertResult:
    """Put back the original bytes of every file, if nobody changed them since the patch. Idempotent."""
    entry = load_entry(host, ledger_dir, patch_id)
    if entry is None:
        raise PatchError(f"no patch {patch_id} in the ledger {ledger_dir}")
    paths = tuple(f.path for f in entry.files)
    if entry.state == "reverted":
        return RevertResult(patch_id, reverted=False, already_reverted=True, files=paths)
    restores: list[FileWrite] = []
    for f in entry.files:
        if host.realpath(f.path) != f.real_path or host.stat(f.real_path) is None:
            raise StaleContext(f"{f.path} no longer resolves to {f.real_path}; revert it by hand")
        current = host.read_bytes(f.real_path)
        if sha256(current) == f.sha256_before:
            continue  # never written (rolled back) or already put back
        if sha256(current) != f.sha256_after:
            raise StaleContext(
                f"{f.path} changed since patch {patch_id} was applied (sha256 "
                f"{sha256(current)[:12]}, expected {f.sha256_after[:12]}): not overwriting it"
            )
        original = host.read_bytes(f.original)
        if sha256(original) != f.sha256_before:
            raise PatchError(f"the kept original {f.original} is damaged; cannot revert {f.path}")
        restores.append(FileWrite(f.path, f.real_path, original, current))
    write_all(host, restores)
    save_entry(host, ledger_dir, entry, "reverted")
    return RevertResult(patch_id, reverted=True, already_reverted=False, files=paths)


def revert_all(host: Host, ledger_dir: str, on_revert: Callable[[RevertResult], None] = lambda r: None) -> int:
    """Revert every applied patch of a ledger, each file's newest patch first; returns how many. All or nothing.

    The order comes from the files, not from clocks (tools/revert_plan.py): a patch is on top when every one of
    its files holds its ``sha256_after``. The whole order is checked before the first write, so a patch under a
    later session's patch, or a file edited by hand, refuses the revert with nothing reverted.
    """
    # "applying": a write a kill cut short; its files are partly written, each back from the kept original
    pending = [e for e in ledger_entries(host, ledger_dir) if e.state in ("applied", "applying")]
    for entry in plan_reverts(host, ledger_dir, pending):
        on_revert(revert_patch(host, entry.patch_id, ledger_dir=ledger_dir))
    return len(pending)


def revert_stack(host: Host, patch_id: str, *, ledger_dir: str) -> list[RevertResult]:
    """Revert ``patch_id`` and, before it, every later patch of the ledger stacked on its files, newest first.

    All or nothing: the order is checked before any write, and if a revert fails on the way, those already done
    are put back (their files and their ledger state), so the files are as they were. Returns what was reverted,
    in the order it came off (``patch_id`` last).
    """
    stack = stack_of(ledger_entries(host, ledger_dir), patch_id)
    if not stack:  # reverted already, rolled back, or never applied: the one-patch revert says which
        return [revert_patch(host, patch_id, ledger_dir=ledger_dir)]
    done: list[tuple[LedgerEntry, list[FileWrite]]] = []
    results = []
    for entry in plan_reverts(host, ledger_dir, stack):
        # what each file holds now is what putting this revert back writes
        held = [FileWrite(f.path, f.real_path, host.read_bytes(f.real_path), b"") for f in entry.files]
        try:
            results.append(revert_patch(host, entry.patch_id, ledger_dir=ledger_dir))
        except (MedicError, OSError) as err:
            raise PatchError(f"reverting patch {entry.patch_id} failed ({err}); "
                             f"{_put_back(host, ledger_dir, done)}") from err
        done.append((entry, held))
    return results


def _put_back(host: Host, ledger_dir: str, done: list[tuple[LedgerEntry, list[FileWrite]]]) -> str:
    """Re-apply the reverts already done, newest first; what that did, in words."""
    if not done:
        return "nothing reverted"
    restored, lost = [], []
    for entry, held in reversed(done):
        try:
            write_all(host, [FileWrite(w.path, w.real_path, w.data, host.read_bytes(w.real_path)) for w in held])
            save_entry(host, ledger_dir, entry, "applied")
            restored.append(entry.patch_id)
        except (MedicError, OSError):
            lost.append(entry.patch_id)
    if not lost:
        return f"put back patch(es) {', '.join(restored)}: nothing reverted"
    return (f"put back {', '.join(restored) or 'none'}; could NOT put back {', '.join(lost)}: "
            "their bytes are in the ledger")
