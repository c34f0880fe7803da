"""README.md's Layout section names every folder of the repository (as git tracks them), so a new folder cannot
appear without a line that says what is inside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tracked_folders() -> set[str]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    folders = {str(Path(f).parent) for f in files if "/" in f}
    # recorded data (tests/data/<kind>/) is named as a whole; dot-folders (.ci/) are machinery, not layout
    return {f for f in folders if not f.startswith(("tests/data/", "."))}


def test_layout_names_every_folder() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    missing = sorted(f for f in tracked_folders() if f"`{f}/`" not in layout)
    assert not missing, f"README's Layout does not name: {missing}"


def test_layout_names_no_folder_that_is_gone() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*)/`", layout))
    gone = sorted(n for n in named if not (REPO / n).is_dir())
    assert not gone, f"README's Layout names folders that do not exist: {gone}"


def test_the_exit_code_table_is_agent_outcomes() -> None:
    """Every outcome has its row (exit code, name) in README's table, and no row names a code medic never gives."""
    from agent.outcomes import OUTCOMES

    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", (REPO / "README.md").read_text(), re.M))
    assert {name: int(code) for code, name in rows.items()} == {n: o.exit_code for n, o in OUTCOMES.items()}
    assert 1 not in {o.exit_code for o in OUTCOMES.values()}  # Python's own code for a crash is never medic's
