"""The whole tree's import graph (bench/imports.py) has no circle, and it is the whole tree: every folder's Python
files are in it, the labs, the benches and the tests too. Seconds: it only parses files."""

from __future__ import annotations

from pathlib import Path

from bench.imports import arrows, circles, modules

REPO = Path(__file__).resolve().parents[1]


def test_the_count_covers_every_folder_of_the_tree() -> None:
    found = modules(REPO)
    tops = {name.split(".", 1)[0] for name in found}
    assert {"agent", "tools", "lab", "bench", "tests"} <= tops, sorted(tops)
    assert "lab.server_pairs" in found and "bench.imports" in found and "tests.test_import_graph" in found
    assert not any(part.startswith(".") for path in found.values() for part in path.relative_to(REPO).parts)


def test_no_import_circle_anywhere_in_the_tree() -> None:
    assert circles(arrows(modules(REPO))) == []


def test_an_import_inside_a_function_still_closes_a_circle(tmp_path: Path) -> None:
    """What the count must not miss: an import moved into a function (or under TYPE_CHECKING) to dodge a circle."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import thing\n")
    (tmp_path / "pkg" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\n")
    (tmp_path / "pkg" / "c.py").write_text("def late():\n    from pkg.a import other\n")
    assert circles(arrows(modules(tmp_path))) == [["pkg.a", "pkg.b", "pkg.c"]]
