"""`medic revert` is all-or-nothing across sessions: two real sessions of one workdir patch the same file, the
second on top of the first. Reverting the first refuses with every byte left as it was and names the second
session's patch; after `medic revert` of the second, the first comes off and the files are pristine again.
"""

from __future__ import annotations

from pathlib import Path

from agent.config import SessionConfig
from agent.session_files import save_config
from tests.fixtures_fake import Fake, MakeFake, medic_cli
from tools.host import LocalHost
from tools.patches import apply_patch, ledger_entries, make_patch

HOST = LocalHost()


def patch_session(config: SessionConfig, fake: Fake, edits: dict[Path, tuple[str, str]]) -> str:
    """Apply one patch through the session's own ledger, as its repair loop would; returns the patch id."""
    changes = {str(p): p.read_text().replace(old, new) for p, (old, new) in edits.items()}
    patch = make_patch(HOST, changes, rationale="test", origin="derived:test")
    apply_patch(HOST, patch, roots=[str(fake.site), str(fake.work)], ledger_dir=config.ledger_dir)
    return patch.id


def snapshot(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for d in folders for p in sorted(d.rglob("*.py")) if "__pycache__" not in str(p)}


def test_revert_of_a_session_under_a_later_one_reverts_nothing(make_fake: MakeFake) -> None:
    fake = make_fake(session_id="first", mode="unattended")
    second = SessionConfig.model_validate({**fake.config.model_dump(), "session_id": "second-run",
                                           "instance": "0123abcd"})
    save_config(second)
    lib, caller = fake.site / "fakelib" / "__init__.py", fake.caller
    pristine = snapshot(fake.site, fake.work)
    # first: a patch on the caller alone (on top of its own stack), then one on the library
    first_caller = patch_session(fake.config, fake, {caller: ("legacy=True", "legacy=False")})
    first_lib = patch_session(fake.config, fake, {lib: ("return f'{x}:{mode}'", "return f'{x}:{mode}!'")})
    # second: on top of the first's library patch
    second_lib = patch_session(second, fake, {lib: ("{mode}!'", "{mode}?'")})
    stacked = snapshot(fake.site, fake.work)

    done = medic_cli("revert", "first")
    assert done.returncode != 0, done.stderr
    last = [line for line in done.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("medic: ") and f"patch {first_lib}" in last and f"patch {second_lib}" in last, last
    assert "medic revert second-run" in last, last
    assert "reverted" not in done.stderr.replace("nothing reverted", ""), done.stderr  # no patch came off
    assert snapshot(fake.site, fake.work) == stacked
    assert {e.patch_id: e.state for e in ledger_entries(HOST, fake.config.ledger_dir)} == {
        first_caller: "applied", first_lib: "applied"}

    assert medic_cli("revert", "second-run").returncode == 0
    done = medic_cli("revert", "first")
    assert done.returncode == 0, done.stderr
    assert snapshot(fake.site, fake.work) == pristine


def test_a_hand_edit_under_a_patch_reverts_nothing_and_says_so(make_fake: MakeFake) -> None:
    fake = make_fake(session_id="hand", mode="unattended")
    lib = fake.site / "fakelib" / "__init__.py"
    patch_session(fake.config, fake, {fake.caller: ("legacy=True", "legacy=False")})
    patch_session(fake.config, fake, {lib: ("return f'{x}:{mode}'", "return f'{x}:{mode}!'")})
    lib.write_text(lib.read_text() + "# a hand edit\n")
    before = snapshot(fake.site, fake.work)
    done = medic_cli("revert", "hand")
    assert done.returncode != 0
    assert "changed since patch" in done.stderr and "nothing reverted" in done.stderr, done.stderr
    assert snapshot(fake.site, fake.work) == before
