"""The order a session's patches come off in, worked out and checked in full before any byte is written.

A revert is all-or-nothing: every file of every patch must hold what that patch's revert expects, in stack
order (a patch is on top when each of its files holds its ``sha256_after``). When a file holds something else,
nothing is reverted and the error says why — usually a later session's patch on the same file: ledgers of
other sessions of the workdir are siblings (``{workdir}/.medic/{session}-{instance}/patches``), so the patch
whose ``sha256_after`` the file holds can be named, with the session to revert first.

Within one ledger, reverting one patch takes with it every later patch stacked on its files (``stack_of``):
they were made against the bytes it wrote, so they cannot stay once it comes off.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from tools.diffs import sha256
from tools.errors import PatchError, StaleContext
from tools.host import Host
from tools.ledger import LedgerEntry, LedgerFile, ledger_entries

MAX_CHAIN = 20  # later sessions stacked on one file, at most, that an error lists


def stack_of(entries: list[LedgerEntry], patch_id: str) -> list[LedgerEntry]:
    """The applied patch ``patch_id`` and every patch of the ledger applied after it on one of its files, or on a
    file of one of those (a patch spanning two files carries the stack to the second). ``entries`` oldest first."""
    at = next((i for i, e in enumerate(entries) if e.patch_id == patch_id), None)
    if at is None or entries[at].state != "applied":
        return []
    stack, files = [entries[at]], {f.real_path for f in entries[at].files}
    for later in entries[at + 1:]:
        if later.state == "applied" and files & {f.real_path for f in later.files}:
            stack.append(later)
            files |= {f.real_path for f in later.files}
    return stack


def plan_reverts(host: Host, ledger_dir: str, pending: list[LedgerEntry]) -> list[LedgerEntry]:
    """``pending`` in the order to revert them; StaleContext/PatchError, having written nothing, if one cannot."""
    files = {f.real_path: f for e in pending for f in e.files}
    for f in files.values():
        if host.realpath(f.path) != f.real_path or host.stat(f.real_path) is None:
            raise StaleContext(f"{f.path} no longer resolves to {f.real_path}; revert it by hand (nothing reverted)")
    # the file's content as the plan goes: read once, then known from each revert (sha256_before)
    digests = {path: sha256(host.read_bytes(path)) for path in files}
    left, order = list(pending), []
    while left:
        on_top = [e for e in left if all(digests[f.real_path] == f.sha256_after for f in e.files)]
        # a file already back at sha256_before (put back by hand) is skipped by the revert itself
        loose = [e for e in left if all(digests[f.real_path] in (f.sha256_after, f.sha256_before) for f in e.files)]
        if not (on_top or loose):
            raise _blocked(host, ledger_dir, left[-1], digests)
        entry = (on_top or loose)[-1]
        for f in entry.files:
            if digests[f.real_path] == f.sha256_after:
                _check_original(host, entry.patch_id, f)
            digests[f.real_path] = f.sha256_before
        order.append(entry)
        left.remove(entry)
    return order


def _check_original(host: Host, patch_id: str, f: LedgerFile) -> None:
    if host.stat(f.original) is None or sha256(host.read_bytes(f.original)) != f.sha256_before:
        raise PatchError(f"the kept original {f.original} of patch {patch_id} is missing or damaged; cannot "
                         f"revert {f.path} (nothing reverted)")


def _blocked(host: Host, ledger_dir: str, entry: LedgerEntry, digests: dict[str, str]) -> StaleContext:
    """Why ``entry`` cannot come off: the later patches (of other sessions) on its file, or a hand edit."""
    f = next(f for f in entry.files if digests[f.real_path] not in (f.sha256_after, f.sha256_before))
    others = _sibling_patches(host, ledger_dir, f.real_path)
    chain: list[Applied] = []  # from the top of the stack down to the patch right above ours
    current = digests[f.real_path]
    while current != f.sha256_after and len(chain) < MAX_CHAIN:
        above = next((p for p in others if p.sha256_after == current and p not in chain), None)
        if above is None:
            break
        chain.append(above)
        current = above.sha256_before
    if chain and current == f.sha256_after:
        sessions = " then ".join(f"`medic revert {s}`" for s in dict.fromkeys(p.session for p in chain))
        patches = ", ".join(f"patch {p.patch_id} of session {p.session}" for p in chain)
        return StaleContext(f"patch {entry.patch_id} lies under {patches} on {f.path}: {sessions} first "
                            "(nothing reverted)")
    return StaleContext(f"{f.path} changed since patch {entry.patch_id} was applied (sha256 "
                        f"{digests[f.real_path][:12]}, expected {f.sha256_after[:12]}) and no patch of another "
                        "session of this workdir explains it: not overwriting it (nothing reverted)")


@dataclass(frozen=True)
class Applied:
    """One file of an applied patch in another session's ledger."""

    session: str
    patch_id: str
    sha256_before: str
    sha256_after: str


def _sibling_patches(host: Host, ledger_dir: str, real_path: str) -> list[Applied]:
    """Every applied patch on ``real_path`` in the other sessions' ledgers of this workdir."""
    own = posixpath.dirname(ledger_dir.rstrip("/"))
    medic_dir = posixpath.dirname(own)
    listing = host.run(["ls", "-1A", medic_dir], timeout=30)
    found = []
    for name in sorted(listing.stdout.split("\n") if listing.ok else []):
        folder = posixpath.join(medic_dir, name)
        if not name or folder == own or "-" not in name:
            continue
        session = name.rsplit("-", 1)[0]  # `{session}-{instance}`: the instance has no '-'
        try:
            entries = ledger_entries(host, posixpath.join(folder, "patches"))
        except PatchError:  # a damaged foreign ledger only makes the message vaguer
            continue
        found += [Applied(session, e.patch_id, f.sha256_before, f.sha256_after) for e in entries
                  if e.state == "applied" for f in e.files if f.real_path == real_path]
    return found
