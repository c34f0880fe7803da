"""The lines of the README's and docs/*.md's ```sh blocks that are not `medic ...` (tests/test_readme_commands.py
holds those) name what is there: every `make` target is the Makefile's; a script or module of this repository run
with python exists and its argparse help knows every option the line passes; a program of the venv
(``.venv/bin/X``) is installed there and its help knows the subcommand the line names. Lines of any other program
(``cd /data/job``) say nothing about this repository and are left alone. Each help runs once, in a fresh process."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.doc_lines import REPO, DocLine, all_lines, variants

PYTHONS = {"python", "python3", ".venv/bin/python", ".venv/bin/python3"}
TARGET = re.compile(r"^([A-Za-z][\w-]*)\s*:(?!=)", re.M)  # `demo: lab`, not `PY ?= …` nor `$(STAMP): …`
LINES = [line for line in all_lines() if line.program != "medic"]


@cache
def help_of(argv: tuple[str, ...]) -> str:
    done = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"`{' '.join(argv)} --help` exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def knows(help_text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text) is not None


def check_python(words: list[str]) -> None:
    """``python [-m] module-or-script [sub …] [--options]``: the module or the script is this repository's."""
    if words[:1] == ["-m"]:
        module, rest = words[1], words[2:]
        assert importlib.util.find_spec(module) is not None, f"no module {module} for `python -m`"
        head: tuple[str, ...] = (sys.executable, "-m", module)
    else:
        script, rest = words[0], words[1:]
        assert (REPO / script).is_file(), f"no script {script} in the repository"
        head = (sys.executable, str(REPO / script))
    subcommands = tuple(w for w in rest[: next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))])
    options = [w.split("=", 1)[0] for w in rest if w.startswith("-")]
    if options:
        said = help_of(head + subcommands)
        assert all(knows(said, o) for o in options), (head, subcommands, options, said[-1500:])


def check_line(line: DocLine, form: list[str]) -> None:
    if line.program == "make":
        targets = set(TARGET.findall((REPO / "Makefile").read_text()))
        missing = [w for w in form if not w.startswith("-") and "=" not in w and w not in targets]
        assert not missing, f"the Makefile has no target {missing} (it has {sorted(targets)})"
    elif line.program in PYTHONS:
        check_python(form)
    elif line.program.startswith(".venv/bin/"):
        program = Path(sys.executable).with_name(line.program.removeprefix(".venv/bin/"))
        assert program.exists(), f"{program.name} is not installed in the venv (pyproject.toml's extras?)"
        if form and not form[0].startswith("-"):
            assert knows(help_of((str(program),)), form[0]), f"`{program.name}` has no subcommand {form[0]}"


def test_the_pages_show_lines_of_each_kind() -> None:
    kinds = {"make" if line.program == "make" else "python" if line.program in PYTHONS else line.program
             for line in LINES}
    assert {"make", "python", ".venv/bin/mkdocs"} <= kinds, kinds


@pytest.mark.parametrize("line", LINES, ids=[line.id for line in LINES])
def test_every_other_command_names_what_is_there(line: DocLine) -> None:
    for form in variants(line.words):
        check_line(line, form)


def test_a_wrong_line_is_caught() -> None:
    """What the check must not let through: a target, a script, an option or a subcommand that is not there."""
    for program, words in (("make", ("demo", "no-such-target")), ("python", ("bench/no_such.py",)),
                           (".venv/bin/python", ("bench/shards.py", "--no-such-option", "1")),
                           (".venv/bin/mkdocs", ("no-such-subcommand",))):
        with pytest.raises(AssertionError):
            check_line(DocLine("t", 0, "", program, words), list(words))
