"""README.md leads with the two commands, what medic does and a map of the repository, and keeps the detail in the
docs/ site: the map names every folder (as git tracks them), so a new folder cannot appear without a line that says
what is inside it; every docs page is named in the README and linked from the site's index; every path and module
the pages name is there; the site builds with ``mkdocs build --strict`` (a page left out of mkdocs.yml's nav, a
broken link or anchor fails it); and the exit-code table is agent/outcomes.py's."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.doc_lines import DOCS, README, REPO, pages

TOP_FOLDERS = ("agent/", "tools/", "lab/", "bench/", "tests/", "playbooks/", "docs/", "traces/")
FENCED = re.compile(r"^```.*?^```", re.M | re.S)


def tracked_folders() -> set[str]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    folders = {str(Path(f).parent) for f in files if "/" in f}
    # recorded data (tests/data/<kind>/) is named as a whole; dot-folders (.ci/) are machinery, not layout
    return {f for f in folders if not f.startswith(("tests/data/", "."))}


def layout() -> str:
    return README.read_text().split("## Layout\n", 1)[1].split("\n## ", 1)[0]


def test_layout_names_every_folder() -> None:
    missing = sorted(f for f in tracked_folders() if f"`{f}/`" not in layout())
    assert not missing, f"README's Layout does not name: {missing}"


def test_layout_names_no_folder_that_is_gone() -> None:
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*)/`", layout()))
    gone = sorted(n for n in named if not (REPO / n).is_dir())
    assert not gone, f"README's Layout names folders that do not exist: {gone}"


def test_the_readme_leads_with_the_two_commands_what_medic_does_and_the_map() -> None:
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:3] == ["Two commands", "What medic does", "Layout"], sections
    first_block = re.search(r"^```sh\n(.*?)^```", text, re.M | re.S)
    assert first_block and [line.split("#")[0].strip() for line in first_block.group(1).splitlines()] == [
        "make demo", "make test"]
    assert len(text.splitlines()) <= 120, "the README keeps the detail in docs/: move it to a page"


def test_every_docs_page_is_named_in_the_readme_and_linked_from_the_index() -> None:
    topics = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    readme, index = README.read_text(), (DOCS / "index.md").read_text()
    assert topics and not {t for t in topics if f"`docs/{t}`" not in readme}, "README's page table"
    assert not {t for t in topics if f"]({t})" not in index}, "docs/index.md's page table"
    named = set(re.findall(r"`docs/([\w-]+\.md)`", readme))
    assert named <= topics, f"README names pages that do not exist: {sorted(named - topics)}"


def test_the_readme_drawing_is_the_graph_modules_own() -> None:
    """The README's drawing is the start of agent/graph.py's, which tests/test_graph_shape.py holds to the graph."""
    graph_doc = (REPO / "agent" / "graph.py").read_text().split('"""')[1]
    drawings = [b for b in re.findall(r"^```text\n(.*?)^```", README.read_text(), re.M | re.S) if "─►" in b]
    assert drawings
    for drawing in drawings:
        assert drawing.rstrip("\n") in graph_doc, drawing


def test_every_path_the_pages_name_is_there() -> None:
    """`agent/…`, `tools/…` in the pages' text (a command's first word too), and in docs/layout.md each module a
    folder's line names (`state.py`, `scan*.py`) under that folder."""
    missing = []
    for page in pages():
        for span in re.findall(r"`([^`\n]+)`", FENCED.sub("", page.read_text())):
            path = span.split()[0]
            if path.startswith(TOP_FOLDERS) and not (any(REPO.glob(path)) if "*" in path else (REPO / path).exists()):
                missing.append(f"{page.name}: {path}")
    for item in re.split(r"(?m)^(?=\s*- `)", (DOCS / "layout.md").read_text()):
        folder = re.match(r"\s*- `([\w/]+/)`", item)
        for name in re.findall(r"`([\w*]+\.(?:py|sh))`", item) if folder else []:
            if not any((REPO / folder.group(1)).rglob(name)):
                missing.append(f"layout.md: {folder.group(1)}…/{name}")
    assert not missing, missing


def test_the_docs_site_builds_strict() -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    assert mkdocs.exists(), "mkdocs is a dev extra (pyproject.toml): pip install -e '.[dev]'"
    with tempfile.TemporaryDirectory(prefix="medic-docs-") as site:
        done = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", site], cwd=REPO, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-3000:]
        built = {p.parent.name or "index" for p in Path(site).rglob("index.html") if p.parent != Path(site)}
        assert built >= {p.stem for p in DOCS.glob("*.md")} - {"index"}, built
        assert (Path(site) / "index.html").is_file()


def test_the_exit_code_table_is_agent_outcomes() -> None:
    """Every outcome has its row (exit code, name) in docs/exit-codes.md's table, and no row names a code medic
    never gives."""
    from agent.outcomes import OUTCOMES

    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", (DOCS / "exit-codes.md").read_text(), re.M))
    assert {name: int(code) for code, name in rows.items()} == {n: o.exit_code for n, o in OUTCOMES.items()}
    assert 1 not in {o.exit_code for o in OUTCOMES.values()}  # Python's own code for a crash is never medic's
