"""Reverting a patch that later patches of the session touched (the same file) takes those off first, newest
first, all or nothing — on a real file with three stacked patches, through the tools and through the revert node.

Before: the revert node called revert_patch on the patch under the others, which refused ("changed since patch
… was applied … not overwriting it") and the exception ended medic with exit 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.nodes.patching import revert
from agent.patch_records import KeptPatch
from agent.session import make_deps
from agent.state import SessionState
from tests.fixtures_fake import Fake, MakeFake
from tools.errors import PatchError, StaleContext
from tools.host import LocalHost
from tools.patches import Patch, apply_patch, ledger_entries, make_patch
from tools.reverts import revert_stack

HOST = LocalHost()
EDITS = [("return f'{x}:{mode}'", "return f'{x}:{mode}!'"), ("{mode}!'", "{mode}!?'"), ("{mode}!?'", "{mode}!?#'")]


def stack_three(fake: Fake) -> tuple[Path, list[Patch], list[bytes]]:
    """Three patches of one session's ledger on fakelib/__init__.py, each made on the bytes the previous wrote;
    the file's bytes before each and after the last."""
    lib = fake.site / "fakelib" / "__init__.py"
    patches, held = [], [lib.read_bytes()]
    for old, new in EDITS:
        patch = make_patch(HOST, {str(lib): lib.read_text().replace(old, new)}, rationale="test", origin="derived:test")
        apply_patch(HOST, patch, roots=[str(fake.site), str(fake.work)], ledger_dir=fake.config.ledger_dir)
        patches.append(patch)
        held.append(lib.read_bytes())
    return lib, patches, held


def states(fake: Fake) -> dict[str, str]:
    return {e.patch_id: e.state for e in ledger_entries(HOST, fake.config.ledger_dir)}


class FailingWrites(LocalHost):
    """A real LocalHost whose ``fail_at``-th write fails as a full disk would (the fault injected)."""

    def __init__(self, fail_at: int) -> None:
        self.writes, self.fail_at = 0, fail_at

    def write_bytes_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        self.writes += 1
        if self.writes == self.fail_at:
            raise OSError(28, "No space left on device")
        super().write_bytes_atomic(path, data, mode)


def test_reverting_the_bottom_patch_takes_the_two_above_it_off_first(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended")
    lib, (p1, p2, p3), held = stack_three(fake)
    done = revert_stack(HOST, p1.id, ledger_dir=fake.config.ledger_dir)
    assert [r.patch_id for r in done] == [p3.id, p2.id, p1.id]
    assert all(r.reverted for r in done)
    assert lib.read_bytes() == held[0]
    assert states(fake) == {p1.id: "reverted", p2.id: "reverted", p3.id: "reverted"}


def test_a_failure_on_the_way_puts_back_what_had_come_off(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended")
    lib, (p1, p2, p3), held = stack_three(fake)
    # writes per revert: the file, then its ledger entry; the 3rd write is p2's file, after p3 came off
    with pytest.raises(PatchError) as err:
        revert_stack(FailingWrites(fail_at=3), p1.id, ledger_dir=fake.config.ledger_dir)
    assert f"reverting patch {p2.id} failed" in str(err.value) and "nothing reverted" in str(err.value), err.value
    assert p3.id in str(err.value)  # it says which it put back
    assert lib.read_bytes() == held[-1]
    assert states(fake) == {p1.id: "applied", p2.id: "applied", p3.id: "applied"}
    # and the same revert goes through once the disk takes writes again
    assert [r.patch_id for r in revert_stack(HOST, p1.id, ledger_dir=fake.config.ledger_dir)] == [p3.id, p2.id, p1.id]
    assert lib.read_bytes() == held[0]


def test_a_hand_edit_on_top_refuses_with_nothing_reverted(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended")
    lib, (p1, _p2, _p3), _held = stack_three(fake)
    lib.write_text(lib.read_text() + "# edited by hand\n")
    edited = lib.read_bytes()
    with pytest.raises(StaleContext, match="nothing reverted"):
        revert_stack(HOST, p1.id, ledger_dir=fake.config.ledger_dir)
    assert lib.read_bytes() == edited
    assert set(states(fake).values()) == {"applied"}


def kept(patch: Patch) -> KeptPatch:
    data: dict[str, Any] = {"patch": patch.model_dump(mode="json"), "origin": patch.origin,
                            "rationale": patch.rationale, "evidence": [], "checks": [], "fault_index": 0}
    return data  # type: ignore[return-value]


def test_the_revert_node_reverts_the_stack_and_records_each_patch(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended")
    lib, (p1, p2, p3), held = stack_three(fake)
    deps = make_deps(fake.config, host=HOST)
    state: SessionState = {"patches": [kept(p1), kept(p2), kept(p3)], "tried": [],
                           "pending_checks": [{"kind": "import", "patch_id": p2.id},  # type: ignore[typeddict-item]
                                              {"kind": "import", "patch_id": "other"}],  # type: ignore[typeddict-item]
                           "run": {"failed_patch": p1.id}}  # type: ignore[typeddict-item]
    try:
        update = revert(state, deps)
    finally:
        deps.trace.close()
    assert update["patches"] == [] and update["tried"] == [p3.id, p2.id, p1.id]
    assert [c["patch_id"] for c in update["pending_checks"]] == ["other"]
    assert lib.read_bytes() == held[0]
    reverted = fake.events("reverted")
    assert [(e["patch_id"], e.get("above")) for e in reverted] == [(p3.id, p1.id), (p2.id, p1.id), (p1.id, None)]


def test_the_revert_node_ends_the_session_when_the_stack_cannot_come_off(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended")
    lib, (p1, p2, p3), _held = stack_three(fake)
    lib.write_text(lib.read_text() + "# edited by hand\n")
    deps = make_deps(fake.config, host=HOST)
    try:
        update = revert({"patches": [kept(p1), kept(p2), kept(p3)], "run": {"failed_patch": p1.id}},  # type: ignore[typeddict-item]
                        deps)
    finally:
        deps.trace.close()
    assert update["outcome"] == "no_repair" and "cannot be reverted" in update["outcome_detail"], update
    assert "patches" not in update  # nothing came off: the state keeps all three
    assert fake.events("reverted") == []
