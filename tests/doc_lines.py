"""The command lines the README and the docs/ pages show, as words: every line of their ```sh blocks.

A line is read as the pages write it: ``\\`` continues a line, ``#`` starts a comment, ``[...]`` groups are
optional and ``a | b`` inside one are alternatives (``variants``). ``VAR=value`` words before the program are the
line's environment, not its program. tests/test_readme_commands.py holds the ``medic`` lines to the real CLI (and
runs those that can run here); tests/test_docs_commands.py holds the others (``make``, scripts of this
repository, programs of the venv) to what they name.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
SH_BLOCK = re.compile(r"^```sh[ \t]*\n(.*?)^```", re.M | re.S)
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


def pages() -> list[Path]:
    """The README, then every docs page in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


@dataclass(frozen=True)
class DocLine:
    page: str  # README.md, docs/lab.md, …
    block: int
    text: str
    program: str
    words: tuple[str, ...]  # after the program

    @property
    def id(self) -> str:
        return f"{self.page}:block{self.block}:" + re.sub(r"[^\w.,:=/-]+", "_", self.text)[:70]


Group = list[list[str]]  # the alternatives of one [...] group


def sh_lines(text: str, page: str) -> list[DocLine]:
    found = []
    for n, block in enumerate(SH_BLOCK.findall(text)):
        for raw in re.sub(r"\\\n", " ", block).splitlines():
            try:
                words = shlex.split(raw, comments=True)
            except ValueError as err:
                raise AssertionError(f"{page} sh block {n}: cannot read {raw!r}: {err}") from None
            while words and ASSIGNMENT.match(words[0]):
                words = words[1:]
            if words:
                found.append(DocLine(page, n, " ".join(raw.split("#")[0].split()), words[0], tuple(words[1:])))
    return found


def all_lines() -> list[DocLine]:
    return [line for page in pages() for line in sh_lines(page.read_text(), str(page.relative_to(REPO)))]


def split_groups(words: tuple[str, ...]) -> list[str | Group]:
    """Words and [optional | groups], in order; nothing after a bare ``--`` is the pages' syntax."""
    items: list[str | Group] = []
    group: Group | None = None
    rest = False
    for word in words:
        if rest:
            items.append(word)
            continue
        if group is None and word.startswith("["):
            group, word = [[]], word[1:]
        if group is None:
            rest = word == "--"
            items.append(word)
            continue
        closing = word.endswith("]")
        word = word.rstrip("]") if closing else word
        if word == "|":
            group.append([])
        elif word:
            group[-1].append(word)
        if closing:
            items.append(group)
            group = None
    assert group is None, f"unclosed [ in {' '.join(words)}"
    return items


def variants(words: tuple[str, ...]) -> list[list[str]]:
    """The line without its optional groups, then with each alternative of each group."""
    items = split_groups(words)
    forms = [[w for w in items if isinstance(w, str)]]
    for i, item in enumerate(items):
        if isinstance(item, str):
            continue
        for alternative in item:
            form: list[str] = []
            for j, other in enumerate(items):
                if isinstance(other, str):
                    form.append(other)
                elif j == i:
                    form.extend(alternative)
            forms.append(form)
    return forms
