"""Patches on a real folder through LocalHost: refusals leave every byte as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools.errors import HostError, OutsideRoots, PatchDoesNotCompile, PatchError, StaleContext
from tools.host import LocalHost
from tools.patches import (
    Patch,
    apply_patch,
    ledger_entries,
    make_patch,
    parse_diff,
    patch_from_diff,
    sha256,
)
from tools.reverts import revert_all, revert_patch

HOST = LocalHost()
ORIGINAL = {
    "pkg/a.py": "def a(x):\n    return x\n",
    "pkg/b.py": "import os\n\n\ndef b():\n    return os.sep\n",
    "pkg/c.py": "C = 1\nD = 2\nE = 3",  # no final newline
}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    for rel, text in ORIGINAL.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    return str(tmp_path / "ledger")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def edit(site: Path, rel: str, old: str, new: str) -> tuple[str, str]:
    path = site / rel
    return str(path), path.read_text().replace(old, new)


def three_file_patch(site: Path) -> Patch:
    edits = dict(
        [
            edit(site, "pkg/a.py", "return x", "return x + 1"),
            edit(site, "pkg/b.py", "os.sep", "os.pathsep"),
            edit(site, "pkg/c.py", "E = 3", "E = 4"),
        ]
    )
    return make_patch(HOST, edits, rationale="test", origin="derived:test", evidence=("e",), checks=("c",))


def test_apply_records_ledger_and_revert_is_byte_identical(site: Path, ledger: str) -> None:
    before = snapshot(site)
    patch = three_file_patch(site)
    assert len(patch.id) == 16 and patch.files[0].diff.startswith(
        f"--- a{site}/pkg/a.py\n+++ b{site}/pkg/a.py"
    )
    result = apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert result.applied and not result.already_applied and len(result.files) == 3
    assert (site / "pkg/a.py").read_text() == "def a(x):\n    return x + 1\n"
    assert (site / "pkg/c.py").read_text() == "C = 1\nD = 2\nE = 4"

    raw = json.loads(Path(ledger, f"{patch.id}.json").read_text())
    assert raw["state"] == "applied" and raw["updated_at"]
    for kept in raw["files"]:
        rel = str(Path(kept["path"]).relative_to(site))
        assert kept["sha256_before"] == sha256(before[rel])
        assert kept["sha256_after"] == sha256((site / rel).read_bytes())
        assert Path(kept["original"]).read_bytes() == before[rel]
    [entry] = ledger_entries(HOST, ledger)
    assert entry.patch == patch and entry.state == "applied"

    reverted = revert_patch(HOST, patch.id, ledger_dir=ledger)
    assert reverted.reverted and snapshot(site) == before
    again = revert_patch(HOST, patch.id, ledger_dir=ledger)
    assert again.already_reverted and not again.reverted
    assert ledger_entries(HOST, ledger)[0].state == "reverted"


def test_apply_twice_is_a_no_op(site: Path, ledger: str) -> None:
    patch = three_file_patch(site)
    apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    after = snapshot(site)
    second = apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert second.already_applied and not second.applied and snapshot(site) == after


def test_result_present_without_ledger_record_is_refused(site: Path, ledger: str) -> None:
    patch = three_file_patch(site)
    apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    Path(ledger, f"{patch.id}.json").unlink()
    with pytest.raises(StaleContext, match="does not record it as applied"):
        apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)


def test_stale_context_changes_nothing(site: Path, ledger: str) -> None:
    patch = three_file_patch(site)
    (site / "pkg/c.py").write_text("C = 1\nD = 2\nE = 3\n# someone was here\n")
    before = snapshot(site)
    with pytest.raises(StaleContext, match="changed since patch"):
        apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert snapshot(site) == before and not Path(ledger).exists()


def test_one_bad_hunk_in_three_files_changes_nothing(site: Path, ledger: str) -> None:
    patch = three_file_patch(site)
    bad = patch.files[2].model_copy(update={"diff": patch.files[2].diff.replace(" D = 2", " D = 9")})
    broken = patch.model_copy(update={"files": (*patch.files[:2], bad)})
    before = snapshot(site)
    with pytest.raises(StaleContext, match="no fuzz"):
        apply_patch(HOST, broken, roots=[str(site)], ledger_dir=ledger)
    assert snapshot(site) == before


def test_moved_context_is_refused_without_offset(site: Path, ledger: str) -> None:
    patch = make_patch(HOST, dict([edit(site, "pkg/b.py", "os.sep", "os.pathsep")]), rationale="", origin="t")
    shifted = patch.files[0].diff.replace("@@ -2,4 +2,4 @@", "@@ -1,4 +1,4 @@")
    assert shifted != patch.files[0].diff
    moved = patch.model_copy(update={"files": (patch.files[0].model_copy(update={"diff": shifted}),)})
    with pytest.raises(StaleContext):
        apply_patch(HOST, moved, roots=[str(site)], ledger_dir=ledger)
    assert (site / "pkg/b.py").read_text() == ORIGINAL["pkg/b.py"]


def test_syntax_error_is_never_written(site: Path, ledger: str) -> None:
    patch = make_patch(HOST, {str(site / "pkg/a.py"): "def a(x:\n    return x\n"}, rationale="", origin="llm")
    before = snapshot(site)
    with pytest.raises(PatchDoesNotCompile, match=r"pkg/a\.py:1: "):
        apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert snapshot(site) == before and not Path(ledger).exists()


def test_dotdot_escape_is_refused(site: Path, tmp_path: Path, ledger: str) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("X = 1\n")
    sneaky = f"{site}/pkg/../../outside.py"
    patch = make_patch(HOST, {sneaky: "X = 2\n"}, rationale="", origin="llm")
    with pytest.raises(OutsideRoots, match="outside the allowed roots"):
        apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert outside.read_text() == "X = 1\n"


def test_symlinks_that_leave_the_root_are_refused(site: Path, tmp_path: Path, ledger: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "target.py").write_text("X = 1\n")
    os.symlink(elsewhere / "target.py", site / "pkg/link.py")  # a file link
    os.symlink(elsewhere, site / "pkg/linkdir")  # a parent-folder link
    for path in (site / "pkg/link.py", site / "pkg/linkdir/target.py"):
        patch = make_patch(HOST, {str(path): "X = 2\n"}, rationale="", origin="llm")
        with pytest.raises(OutsideRoots):
            apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert (elsewhere / "target.py").read_text() == "X = 1\n"


def test_symlink_inside_the_root_writes_through_the_link(site: Path, ledger: str) -> None:
    os.symlink(site / "pkg/a.py", site / "pkg/alias.py")
    patch = make_patch(
        HOST, {str(site / "pkg/alias.py"): "def a(x):\n    return 2\n"}, rationale="", origin="t"
    )
    apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert (site / "pkg/alias.py").is_symlink() and "return 2" in (site / "pkg/a.py").read_text()


def test_pycache_of_patched_module_is_removed(site: Path, ledger: str) -> None:
    cache = site / "pkg/__pycache__"
    cache.mkdir()
    for name in ("a.cpython-311.pyc", "a.cpython-311.opt-1.pyc", "b.cpython-311.pyc"):
        (cache / name).write_bytes(b"stale")
    patch = make_patch(
        HOST, dict([edit(site, "pkg/a.py", "return x", "return -x")]), rationale="", origin="t"
    )
    apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert sorted(p.name for p in cache.iterdir()) == ["b.cpython-311.pyc"]


class FailingHost(LocalHost):
    """Fails the write of one file, as a full disk or a dropped connection would."""

    def __init__(self, fail_path: str) -> None:
        self.fail_path = fail_path

    def write_bytes_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        if path == self.fail_path:
            raise HostError(f"cannot write {path}: No space left on device")
        super().write_bytes_atomic(path, data, mode)


def test_failed_write_restores_the_files_already_written(site: Path, ledger: str) -> None:
    patch = three_file_patch(site)
    before = snapshot(site)
    with pytest.raises(PatchError, match=r"put back .*pkg/a\.py.*pkg/b\.py") as caught:
        apply_patch(FailingHost(str(site / "pkg/c.py")), patch, roots=[str(site)], ledger_dir=ledger)
    assert "No space left" in str(caught.value)
    assert snapshot(site) == before
    assert ledger_entries(HOST, ledger)[0].state == "rolled_back"
    assert apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger).applied  # and it can be retried


class KilledHost(LocalHost):
    """medic killed (SIGKILL) while it writes a patch's files: the write of one file never returns."""

    def __init__(self, kill_path: str) -> None:
        self.kill_path = kill_path

    def write_bytes_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        if path == self.kill_path:
            raise SystemExit("killed")  # no except of medic's runs after a kill: nothing is recorded
        super().write_bytes_atomic(path, data, mode)


def test_a_write_a_kill_cut_short_is_finished_by_the_next_apply(site: Path, ledger: str) -> None:
    """The ledger says "applying" (the originals kept) before the first file is written: after a kill between
    two files, the resumed session's apply writes the rest and records it applied; revert is byte-identical."""
    patch = three_file_patch(site)
    before = snapshot(site)
    with pytest.raises(SystemExit):
        apply_patch(KilledHost(str(site / "pkg/c.py")), patch, roots=[str(site)], ledger_dir=ledger)
    assert ledger_entries(HOST, ledger)[0].state == "applying" and snapshot(site) != before
    done = apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert done.applied and ledger_entries(HOST, ledger)[0].state == "applied"
    assert all(sha256(Path(f.path).read_bytes()) == f.sha256_after for f in patch.files)
    revert_patch(HOST, patch.id, ledger_dir=ledger)
    assert snapshot(site) == before


def test_a_write_a_kill_cut_short_is_taken_off_by_revert(site: Path, ledger: str) -> None:
    """`medic revert` after the same kill (no resume): the half-written patch comes off, file for file."""
    patch = three_file_patch(site)
    before = snapshot(site)
    with pytest.raises(SystemExit):
        apply_patch(KilledHost(str(site / "pkg/c.py")), patch, roots=[str(site)], ledger_dir=ledger)
    assert revert_all(HOST, ledger) == 1
    assert snapshot(site) == before and ledger_entries(HOST, ledger)[0].state == "reverted"


def test_revert_refuses_when_someone_edited_the_file(site: Path, ledger: str) -> None:
    patch = three_file_patch(site)
    apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    (site / "pkg/b.py").write_text("# hand edit\n")
    after = snapshot(site)
    with pytest.raises(StaleContext, match=r"changed since patch \w+ was applied"):
        revert_patch(HOST, patch.id, ledger_dir=ledger)
    assert snapshot(site) == after
    with pytest.raises(PatchError, match="no patch"):
        revert_patch(HOST, "0" * 16, ledger_dir=ledger)


def test_revert_all_takes_patches_off_in_stack_order_whatever_the_clock_says(site: Path, ledger: str) -> None:
    """Three stacked patches on one file (plus one on another) whose ledger stamps are equal or run backwards,
    as when the scan applies several in one second: every byte still comes back, newest first per file."""
    before = snapshot(site)
    ids = []
    for old, new in (("return x", "return x + 1"), ("x + 1", "x + 2"), ("x + 2", "x * 3")):
        patch = make_patch(HOST, dict([edit(site, "pkg/a.py", old, new)]), rationale="t", origin="derived:t")
        apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
        ids.append(patch.id)
    other = make_patch(HOST, dict([edit(site, "pkg/b.py", "os.sep", "os.pathsep")]), rationale="t", origin="t")
    apply_patch(HOST, other, roots=[str(site)], ledger_dir=ledger)
    for stamp, pid in zip(("2026-01-01T00:00:09", "2026-01-01T00:00:00", "2026-01-01T00:00:00"), ids, strict=True):
        raw = json.loads(Path(ledger, f"{pid}.json").read_text())
        Path(ledger, f"{pid}.json").write_text(json.dumps({**raw, "updated_at": stamp}))
    order: list[str] = []
    assert revert_all(HOST, ledger, lambda r: order.append(r.patch_id)) == 4
    assert snapshot(site) == before
    assert [i for i in order if i in ids] == ids[::-1]
    assert revert_all(HOST, ledger) == 0  # nothing left applied


def test_revert_all_refuses_a_file_edited_by_someone_else(site: Path, ledger: str) -> None:
    patch = make_patch(HOST, dict([edit(site, "pkg/a.py", "return x", "return -x")]), rationale="t", origin="t")
    apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    (site / "pkg/a.py").write_text("hand edit\n")
    with pytest.raises(StaleContext, match=r"changed since patch \w+ was applied"):
        revert_all(HOST, ledger)
    assert (site / "pkg/a.py").read_text() == "hand edit\n"


def test_patch_json_round_trip_and_stable_id(site: Path) -> None:
    patch = three_file_patch(site)
    assert Patch.model_validate_json(patch.model_dump_json()) == patch
    assert three_file_patch(site).id == patch.id
    assert patch.evidence == ("e",) and patch.checks == ("c",)
    with pytest.raises(PatchError, match="change nothing"):
        make_patch(HOST, {str(site / "pkg/a.py"): ORIGINAL["pkg/a.py"]}, rationale="", origin="t")


def test_parse_diff_handles_missing_final_newline(site: Path) -> None:
    patch = three_file_patch(site)
    [(path, diff)] = parse_diff(patch.files[2].diff).items()
    assert path == str(site / "pkg/c.py")
    [hunk] = diff.hunks
    assert hunk.source_lines[-1] == "E = 3" and hunk.target_lines[-1] == "E = 4"
    with pytest.raises(PatchError, match="names no file"):
        parse_diff("this is not a diff\n")
    with pytest.raises(PatchError, match="not a unified diff: Hunk is shorter"):
        parse_diff("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n")


def test_patch_from_a_models_relative_diff(site: Path, ledger: str) -> None:
    diff = "--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,2 +1,2 @@\n def a(x):\n-    return x\n+    return x * 2\n"
    patch = patch_from_diff(HOST, diff, rationale="llm says", origin="llm", base_dir=str(site))
    assert patch.files[0].path == str(site / "pkg/a.py")
    apply_patch(HOST, patch, roots=[str(site)], ledger_dir=ledger)
    assert (site / "pkg/a.py").read_text() == "def a(x):\n    return x * 2\n"
    with pytest.raises(StaleContext):  # the same diff no longer matches
        patch_from_diff(HOST, diff, rationale="", origin="llm", base_dir=str(site))
