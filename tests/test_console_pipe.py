"""Output piped to a file or a log is never hard-wrapped: a long path stays on one line, whole."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures_fake import MakeFake, medic_cli
from tools.host import LocalHost
from tools.patches import apply_patch, make_patch


def deep(tmp_path: Path, name: str) -> Path:
    return tmp_path / ("a-rather-long-folder-name-that-goes-on-" * 3) / name


def test_a_long_path_in_a_message_is_one_line_through_a_pipe(tmp_path: Path) -> None:
    home = deep(tmp_path, "medic-home")
    home.mkdir(parents=True)
    done = medic_cli("sessions", env={"MEDIC_HOME": str(home), "COLUMNS": ""})
    assert done.returncode == 0, done.stderr
    assert f"no sessions under {home}" in done.stderr.splitlines(), done.stderr


def test_revert_names_each_long_path_whole(make_fake: MakeFake) -> None:
    """`medic revert` lists the files it put back: each path intact on its line, however long."""
    fake = make_fake(session_id="wide", mode="unattended")
    target = fake.work / ("sub-folder-with-a-long-name-" * 4) / "module_with_a_long_name.py"
    target.parent.mkdir(parents=True)
    target.write_text("VALUE = 1\n")
    patch = make_patch(LocalHost(), {str(target): "VALUE = 2\n"}, rationale="t", origin="t")
    apply_patch(LocalHost(), patch, roots=[str(fake.work)], ledger_dir=fake.config.ledger_dir)
    done = medic_cli("revert", "wide")
    assert done.returncode == 0, done.stderr
    assert f"reverted {patch.id}: {target}" in done.stderr.splitlines(), done.stderr
    assert target.read_text() == "VALUE = 1\n"
