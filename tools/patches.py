"""Patches to library files on a host: checked with zero fuzz, applied all-or-nothing, reverted byte for byte.

A ``Patch`` pins each file by the sha256 of its text before and after. ``apply_patch`` refuses paths that
leave the allowed roots (``..`` and symlinks resolved by the host), context that moved, results that do not
hash to ``sha256_after`` or do not compile, and it validates every file before it writes any. The ledger
(``<ledger_dir>/<patch_id>.json`` plus ``<ledger_dir>/<patch_id>/orig/<sha256_before>``) keeps the original
bytes, so a revert (tools/reverts.py) needs only the id. Only Host calls touch the target, so SSH works the same.

``Patch`` and the diff text work live in tools/diffs.py, the ledger in tools/ledger.py; both are re-exported
here, so callers import everything patch-related from ``tools.patches``.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools import pysyntax
from tools.diffs import (
    NO_NEWLINE,
    ArgEdit,
    EnvEdit,
    FileDiff,
    FilePatch,
    Hunk,
    Patch,
    apply_hunks,
    arg_patch,
    decode_source,
    env_patch,
    parse_diff,
    sha256,
    unified_diff,
)
from tools.errors import MedicError, OutsideRoots, PatchDoesNotCompile, PatchError, StaleContext
from tools.host import Host
from tools.ledger import LedgerEntry, LedgerFile, ledger_entries, load_entry, save_entry

__all__ = [
    "NO_NEWLINE",
    "ApplyResult",
    "ArgEdit",
    "EnvEdit",
    "FileDiff",
    "FilePatch",
    "FileWrite",
    "Hunk",
    "LedgerEntry",
    "LedgerFile",
    "Patch",
    "apply_hunks",
    "apply_patch",
    "arg_patch",
    "env_patch",
    "ledger_entries",
    "load_entry",
    "make_patch",
    "parse_diff",
    "patch_from_diff",
    "sha256",
    "unified_diff",
    "write_all",
]


@dataclass(frozen=True)
class ApplyResult:
    patch_id: str
    applied: bool
    already_applied: bool
    files: tuple[str, ...]


def make_patch(
    host: Host,
    edits: Mapping[str, str],
    *,
    rationale: str,
    origin: str,
    evidence: Sequence[str] = (),
    checks: Sequence[str] = (),
) -> Patch:
    """A patch turning each existing file ``path`` into ``edits[path]``, pinned to its current content."""
    files = []
    for path in sorted(edits):
        st = host.stat(path)
        if not posixpath.isabs(path) or st is None or st.is_dir:
            raise PatchError(f"make_patch edits existing files by absolute path only: {path}")
        raw = host.read_bytes(path)
        before, after = decode_source(raw, path), edits[path]
        if before == after:
            continue
        diff = unified_diff(path, before, after)
        if apply_hunks(before, next(iter(parse_diff(diff).values()))) != after:  # must round-trip exactly
            raise PatchError(
                f"{path}: the generated diff does not reproduce the edit (unusual line endings?)"
            )
        files.append(
            FilePatch(path=path, diff=diff, sha256_before=sha256(raw), sha256_after=sha256(after.encode()))
        )
    if not files:
        raise PatchError("the edits change nothing")
    patch_id = sha256("".join(f.diff for f in files).encode())[:16]
    return Patch(
        id=patch_id,
        files=tuple(files),
        rationale=rationale,
        origin=origin,
        evidence=tuple(evidence),
        checks=tuple(checks),
    )


def patch_from_diff(
    host: Host,
    diff_text: str,
    *,
    rationale: str,
    origin: str,
    evidence: Sequence[str] = (),
    checks: Sequence[str] = (),
    base_dir: str | None = None,
) -> Patch:
    """A ``Patch`` from a unified diff (a model's answer), if it applies to the files as they are now."""
    edits = {}
    for path, file_diff in parse_diff(diff_text, base_dir=base_dir).items():
        if host.stat(path) is None:
            raise PatchError(f"the diff edits {path}, which does not exist on {host.name}")
        edits[path] = apply_hunks(decode_source(host.read_bytes(path), path), file_diff)
    return make_patch(host, edits, rationale=rationale, origin=origin, evidence=evidence, checks=checks)


@dataclass(frozen=True)
class FileWrite:
    path: str
    real_path: str
    data: bytes  # what goes to real_path
    undo: bytes  # what was there before


def _inside_roots(host: Host, path: str, real_roots: Sequence[str]) -> str:
    """The real path of ``path`` if it (after ``..`` and every symlink) is inside an allowed root."""
    real = host.realpath(path) if posixpath.isabs(path) else path
    if not any(real == root or real.startswith(root.rstrip("/") + "/") for root in real_roots):
        raise OutsideRoots(f"{path} resolves to {real}, outside the allowed roots {', '.join(real_roots)}")
    return real


def _check_compiles(path: str, text: str) -> None:
    if not path.endswith(".py"):
        return
    try:
        pysyntax.check_compiles(text, path)
    except SyntaxError as exc:
        raise PatchDoesNotCompile(f"{path}:{exc.lineno}: {exc.msg}") from exc
    except ValueError as exc:  # e.g. a NUL byte
        raise PatchDoesNotCompile(f"{path}: {exc}") from exc


def write_all(host: Host, writes: Sequence[FileWrite]) -> None:
    """Write each file; if one fails, put back those already written and say what happened."""
    for i, w in enumerate(writes):
        try:
            host.write_bytes_atomic(w.real_path, w.data)
        except (MedicError, OSError) as exc:
            restored, lost = [], []
            for done in writes[:i]:
                try:
                    host.write_bytes_atomic(done.real_path, done.undo)
                    restored.append(done.path)
                except (MedicError, OSError):
                    lost.append(done.path)
            note = f"put back {', '.join(restored)} as they were" if restored else "nothing was written"
            if lost:
                note += f"; could NOT put back {', '.join(lost)}: their bytes are in the ledger"
            raise PatchError(f"writing {w.path} failed ({exc}); {note}") from exc
    drop_bytecode(host, [p for w in writes for p in (w.path, w.real_path)])


def drop_bytecode(host: Host, paths: Sequence[str]) -> None:
    """No interpreter may run the old bytecode: drop __pycache__/<module>.*.pyc (best effort)."""
    stems = {posixpath.join(posixpath.dirname(p), "__pycache__", posixpath.basename(p)[:-3])
             for p in paths if p.endswith(".py")}
    if stems:
        host.run("rm -f -- " + " ".join(f"{shlex.quote(s)}.*.pyc" for s in sorted(stems)), timeout=30)


def apply_patch(host: Host, patch: Patch, *, roots: Sequence[str], ledger_dir: str) -> ApplyResult:
    """Apply every file of ``patch`` or none. Applying an applied patch again is a no-op."""
    if not patch.files:
        raise PatchError(f"patch {patch.id} changes no file")
    entry = load_entry(host, ledger_dir, patch.id)
    # a write medic began and a kill cut short: the ledger kept every original before the first file was written
    resuming = entry is not None and entry.state == "applying"
    real_roots = [host.realpath(root) for root in roots]
    writes: list[FileWrite] = []
    ledger: list[LedgerFile] = []
    already: list[str] = []
    for file in patch.files:
        real = _inside_roots(host, file.path, real_roots)
        if host.stat(real) is None:
            raise StaleContext(f"{file.path} no longer exists on {host.name}")
        current = host.read_bytes(real)
        digest = sha256(current)
        if digest == file.sha256_after and entry is not None and entry.state in ("applied", "applying"):
            already.append(file.path)
            continue
        if digest == file.sha256_after:
            raise StaleContext(
                f"{file.path} already has the result of patch {patch.id}, but the ledger "
                f"{ledger_dir} does not record it as applied: check who patched it"
            )
        if digest != file.sha256_before:
            raise StaleContext(
                f"{file.path} changed since patch {patch.id} was made (sha256 {digest[:12]}, "
                f"expected {file.sha256_before[:12]}): make the patch again"
            )
        diffs = list(parse_diff(file.diff).values())
        if len(diffs) != 1:
            raise PatchError(f"the diff for {file.path} must cover exactly that one file")
        new_text = apply_hunks(decode_source(current, file.path), FileDiff(file.path, diffs[0].hunks))
        if sha256(new_text.encode()) != file.sha256_after:
            raise StaleContext(
                f"{file.path}: the diff does not produce sha256_after; the patch is inconsistent"
            )
        _check_compiles(file.path, new_text)
        writes.append(FileWrite(file.path, real, new_text.encode(), current))
        original = posixpath.join(ledger_dir, patch.id, "orig", file.sha256_before)
        ledger.append(
            LedgerFile(
                path=file.path,
                real_path=real,
                sha256_before=file.sha256_before,
                sha256_after=file.sha256_after,
                original=original,
            )
        )
    if resuming and entry is not None:  # finish it: write what the kill left unwritten, then say applied
        try:
            write_all(host, writes)
        except PatchError:  # what the cut-short write had put in place goes back to the kept originals too
            for kept in entry.files:
                if kept.path in already:
                    host.write_bytes_atomic(kept.real_path, host.read_bytes(kept.original))
            save_entry(host, ledger_dir, entry, "rolled_back")
            raise
        drop_bytecode(host, [p for f in entry.files for p in (f.path, f.real_path)])
        save_entry(host, ledger_dir, entry, "applied")
        return ApplyResult(patch.id, applied=True, already_applied=False, files=tuple(f.path for f in patch.files))
    if not writes:
        return ApplyResult(patch.id, applied=False, already_applied=True, files=tuple(already))
    if already:
        raise StaleContext(
            f"patch {patch.id} is only partly in place ({', '.join(already)}): revert it first"
        )
    if len({w.real_path for w in writes}) != len(writes):
        raise PatchError(f"patch {patch.id} names the same file twice (through a symlink?)")

    # Everything is validated: keep the originals, then write.
    made = host.run(["mkdir", "-p", posixpath.join(ledger_dir, patch.id, "orig")], timeout=30)
    if not made.ok:
        raise PatchError(f"cannot create the ledger folder in {ledger_dir}: {made.stderr.strip()[:200]}")
    for kept in ledger:
        host.write_bytes_atomic(kept.original, next(w.undo for w in writes if w.path == kept.path), 0o644)
    entry = LedgerEntry(patch_id=patch.id, state="applying", updated_at="", files=tuple(ledger), patch=patch)
    entry = save_entry(host, ledger_dir, entry, "applying")
    try:
        write_all(host, writes)
    except PatchError:
        save_entry(host, ledger_dir, entry, "rolled_back")
        raise
    save_entry(host, ledger_dir, entry, "applied")
    return ApplyResult(patch.id, applied=True, already_applied=False, files=tuple(w.path for w in writes))
