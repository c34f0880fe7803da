"""Which program a command's first word names in the target env, and what the shell said when it found none.

``speculators …``, ``vllm serve …``, ``torchrun …`` typed with ``--python /venv/bin/python`` mean that env's
programs, whether or not the venv is activated; the host's PATH may hold another release's, or none. The target
python is asked (on the job's host, through the Host seam): a word is the env's program when it is an entry point
(``console_scripts``/``gui_scripts``) of one of its installed distributions, or a file in the env's own scripts
folder (where its installers put programs: a venv's ``bin``). The script file found there runs; an entry point
whose script file is nowhere runs through the target python itself, as its console script would. A word the env
does not have is left to the PATH the job runs with.

A command the shell cannot find exits 127 and prints the shell's own words (``sh: 1: x: not found``, ``env: 'x':
No such file or directory``). Every run's command line ends with NOT_FOUND_TAIL, which logs the PATH it ran with
on that exit code, so ``not_found`` can say what was looked up and where.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools.errors import HostError, HostUnreachable
from tools.host import Host

# Runs in the target python: argv[1] the word, argv[2] the python as the user named it (a venv's bin/python is
# often a symlink out of the venv: the folder that counts is the one it was named in, never its target).
LOOKUP_PY = r"""
import json, os, site, sys, sysconfig
from importlib.metadata import distributions
sys.path[:] = [p for p in sys.path if p]  # not medic's cwd: the env as its scripts see it
name, given = sys.argv[1], sys.argv[2]
own = sysconfig.get_path("scripts")
folders = [os.path.dirname(given), own]
if site.ENABLE_USER_SITE:
    folders.append(sysconfig.get_path("scripts", os.name + "_user"))
folders = list(dict.fromkeys(folders))
def program(folder):
    path = os.path.join(folder, name)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
entry, count = None, 0
for dist in distributions():
    count += 1
    for ep in dist.entry_points:
        if entry is None and ep.group in ("console_scripts", "gui_scripts") and ep.name == name:
            entry = {"value": ep.value, "group": ep.group, "distribution": dist.metadata["Name"],
                     "version": dist.version}
same = lambda a, b: os.path.realpath(a) == os.path.realpath(b)
scripts = [p for p in map(program, folders) if p]
# a file in the env's own scripts folder is the env's program; elsewhere only an entry point makes it one
mine = [p for p in scripts if entry or same(os.path.dirname(p), own)]
print(json.dumps({"script": mine[0] if mine else None, "entry_point": entry, "searched": folders,
                  "distributions": count}))
"""

# How a console script starts its entry point, for one whose script file is nowhere: argv[0] is the program's
# name, and medic's cwd (python -c puts it first on sys.path) is not on the path.
ENTRY_POINT_PY = ("import sys; from importlib.metadata import EntryPoint; del sys.path[0]; "
                  "name, value, group = sys.argv[1:4]; sys.argv = [name, *sys.argv[4:]]; "
                  "sys.exit(EntryPoint(name, value, group).load()())")

NOT_FOUND_EXIT = 127  # POSIX: the shell found no such command
MARKER = "[medic] exit 127, PATH="
# Appended to every run's command line (tools/runs.py, tools/slurm.py): on 127, the PATH the job ran with.
NOT_FOUND_TAIL = (f'code=$?; [ "$code" -eq {NOT_FOUND_EXIT} ] && printf \'%s%s\\n\' {shlex.quote(MARKER)} "$PATH" >&2; '
                  'exit "$code"')
# The shell's own words for a command it cannot find (dash, bash, busybox, zsh; env/nohup/exec and other
# wrappers that exec their argument); quotes are ASCII or the typographic ones GNU tools use.
NOT_FOUND_LINES = (
    re.compile(r"^(?:.*?: )?(?:line \d+: |\d+: )?(?P<name>[^\s:]+): (?:command )?not found$"),
    re.compile(r"^zsh: command not found: (?P<name>\S+)$"),
    re.compile(r"^[\w.-]+: (?:cannot run command |failed to run command )?['‘`]?(?P<name>[^'’\s]+)['’]?: "
               r"No such file or directory$"),
    re.compile(r"^(?:.*?: )?(?:line \d+: |\d+: )?(?:exec: )?(?P<name>/\S+): (?:No such file or directory|not found)$"),
)
RUN_SCRIPT = re.compile(r"^/\S*/command(?:\.\d+)?\.sh: (?:line )?\d+: ")  # "<run>/command.sh: 1: "


@dataclass(frozen=True)
class Lookup:
    """What the target env has under one name."""

    name: str
    script: str | None = None  # the env's program file
    entry_point: dict[str, str] | None = None  # value, group, distribution, version
    searched: tuple[str, ...] = ()  # the folders looked in
    distributions: int = 0  # how many installed distributions' entry points were read
    error: str = ""  # the target python could not answer

    @property
    def found(self) -> bool:
        return bool(self.script or self.entry_point)

    def describe(self, python: str) -> str:
        """Where the target env was searched, for a report of a name it does not have."""
        if self.error:
            return f"the target python {python} could not be asked ({self.error})"
        folders = ", ".join(self.searched) or "no scripts folder"
        return (f"the target env ({python}) has no program `{self.name}`: not in {folders}, and not an entry point "
                f"of its {self.distributions} installed distribution(s)")


def lookup(host: Host, python: str, name: str, env: Mapping[str, str] | None = None) -> Lookup:
    """Ask the target python what ``name`` is in its env. Never raises: an env that cannot answer has nothing."""
    try:
        answer = host.run([python, "-c", LOOKUP_PY, name, python], timeout=120, env=env)
        data = answer.last_json() if answer.ok else None
    except HostUnreachable:
        raise  # the link is down: the caller waits for it, as for any command
    except HostError as exc:
        return Lookup(name, error=str(exc)[:200])
    if not isinstance(data, dict):
        tail = (answer.stderr.strip().splitlines() or [f"exit {answer.exit_code}, no answer"])[-1]
        return Lookup(name, error=tail[:200])
    return Lookup(name, script=data.get("script"), entry_point=data.get("entry_point"),
                  searched=tuple(data.get("searched") or ()), distributions=int(data.get("distributions") or 0))


def is_bare(word: str) -> bool:
    """A word the shell would look up on PATH (no folder in it), and not a variable assignment."""
    return bool(word) and "/" not in word and "=" not in word and not word.startswith("-")


def resolve(host: Host, python: str, command: Sequence[str], env: Mapping[str, str] | None = None
            ) -> tuple[list[str], dict[str, object] | None]:
    """``command`` with a head that is the target env's program replaced by that program, and what was replaced
    (for the trace; None when the head is not the env's: the PATH the job runs with decides)."""
    words = list(command)
    if not words or not is_bare(words[0]):
        return words, None
    found = lookup(host, python, words[0], env)
    entry = found.entry_point or {}
    if found.script:
        ran, how = [found.script], found.script
    elif entry:
        ran = [python, "-c", ENTRY_POINT_PY, words[0], entry["value"], entry["group"]]
        how = f"{python}, entry point {entry['value']}"
    else:
        return words, None
    note: dict[str, object] = {"given": words[0], "ran": how}
    if entry:
        note["distribution"] = f"{entry['distribution']} {entry['version']}"
    return [*ran, *words[1:]], note


@dataclass(frozen=True)
class NotFound:
    """A run that ended because the shell could not find a program."""

    name: str  # as the shell named it
    line: str  # the shell's own words
    path: str | None  # the PATH the job ran with (None: the run's log did not say)


def not_found(lines: Sequence[str]) -> NotFound | None:
    """The program a run could not start, from its log: the marker of an exit 127 and, before it, the shell's
    words naming what it did not find. A run that printed the words but exited otherwise is not one."""
    marks = [i for i, line in enumerate(lines) if line.startswith(MARKER)]
    if not marks:
        return None
    path = lines[marks[-1]][len(MARKER):].strip()
    for line in reversed(lines[: marks[-1]]):
        for pattern in NOT_FOUND_LINES:
            match = pattern.match(line.strip())
            if match:  # the shell's words without medic's own command.sh prefix
                return NotFound(match["name"], RUN_SCRIPT.sub("", line.strip()), path)
    return None
