"""The real ``medic`` CLI as its help shows it: which subcommands each group has, which options each command takes
(and whether they take a value), and how many positional arguments its usage line allows. ``Cli.check`` holds one
form of a documented line (tests/doc_lines.py) to that; every help is asked once, of the .venv's medic in a fresh
process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.doc_lines import REPO

# a row of typer's help: an option, its aliases (-y, --no-edit), its type
OPTION_ROW = re.compile(r"^[^\w-]*(--[\w-]+)((?:[ \t]+-{1,2}[\w-]+)*)[ \t]+<([^>]+)>", re.M)
COMMAND_ROW = re.compile(r"^[^\w\s-]?\s*([a-z][\w-]*)\s{2,}\S", re.M)
USAGE = re.compile(r"Usage:\s+(.*)")


def medic_argv() -> list[str]:
    exe = Path(sys.executable).with_name("medic")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from agent.cli.main import main; main()"]


@dataclass
class Help:
    text: str
    is_group: bool = False
    commands: set[str] = field(default_factory=set)
    options: dict[str, bool | None] = field(default_factory=dict)  # name or alias: takes a value (None: unknown)
    required: int = 0
    most: float = 0

    def knows(self, option: str) -> bool:
        if self.options:  # typer's rows: the options themselves
            return option in self.options
        return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", self.text) is not None  # plain help text


def read_help(text: str) -> Help:
    help_ = Help(text)
    usage = USAGE.search(text)
    assert usage, text[:2000]
    help_.is_group = "COMMAND" in usage.group(1)
    if help_.is_group:
        commands = text.split("Commands", 1)[1] if "Commands" in text else ""
        help_.commands = set(COMMAND_ROW.findall(commands))
    for name, aliases, kind in OPTION_ROW.findall(text):
        for alias in [name, *aliases.split()]:
            help_.options[alias] = kind != "bool" and not alias.startswith("--no-")
    words = usage.group(1).split()
    for word in words[words.index("[OPTIONS]") + 1:] if "[OPTIONS]" in words else []:
        if word.endswith("..."):
            help_.most = float("inf")
            help_.required += word.startswith("{")
        elif word.startswith("{"):
            help_.required += 1
            help_.most += 1
        elif word.startswith("["):
            help_.most += 1
    return help_


class Cli:
    def __init__(self) -> None:
        self.cache: dict[tuple[str, ...], Help] = {}

    def help(self, path: tuple[str, ...]) -> Help:
        if path not in self.cache:
            done = subprocess.run([*medic_argv(), *path, "--help"], capture_output=True, text=True, timeout=120,
                                  stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "250"}, cwd=REPO)
            assert done.returncode == 0, f"`medic {' '.join(path)} --help` exited {done.returncode}: {done.stderr}"
            self.cache[path] = read_help(done.stdout)
        return self.cache[path]

    def resolve(self, words: list[str]) -> tuple[tuple[str, ...], list[str]]:
        """(the subcommand path, the words after it); fails for a subcommand the CLI does not have."""
        path: tuple[str, ...] = ()
        rest = list(words)
        while self.help(path).is_group:
            assert rest, f"`medic {' '.join(path)}` needs a subcommand"
            sub = rest.pop(0)
            known = self.help(path).commands
            assert sub in known, f"`medic {' '.join(path)}` has no subcommand {sub!r} (it has {sorted(known)})"
            path = (*path, sub)
        return path, rest

    def check(self, words: list[str]) -> None:
        path, rest = self.resolve(words)
        help_ = self.help(path)
        where = f"`medic {' '.join(words)}`"
        positional = 0
        while rest:
            word = rest.pop(0)
            if word == "--":
                positional += len(rest)
                break
            if word.startswith("-") and word != "-":
                name = word.split("=", 1)[0]
                assert help_.knows(name), f"{where}: `medic {' '.join(path)}` has no option {name}"
                if help_.options.get(name) and "=" not in word:
                    assert rest and not rest[0].startswith("-"), f"{where}: {name} takes a value"
                    rest.pop(0)
                continue
            positional += 1
        assert help_.required <= positional <= help_.most, (
            f"{where}: {positional} positional argument(s); `medic {' '.join(path)}` takes "
            f"{help_.required}..{help_.most}")
