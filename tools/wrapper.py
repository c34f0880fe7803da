"""Reading through a job that is the user's own wrapper: which server and which client it runs.

A job given as ``bash run.sh`` (or ``./run.sh``, ``sbatch run.sh``, ``bash -c '…'``, a Python launcher that
starts ``vllm serve`` with subprocess) runs a server and a client medic never sees as commands. Read here, before
any launch, they feed what the ``--server`` form feeds: the scan of the server's library code, the model folder,
the output folder and the layer ids of medic's own check. A shell script is read as the shell splits it
(tools/wrapper_shell.py), a Python launcher from its syntax tree (tools/wrapper_python.py); nothing is run.

Where the reading falls short, ``Wrapped.unseen`` says what was not seen; the report then says what giving the
two commands apart (``--server``) would save.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tools import hs_layouts
from tools.errors import MedicError
from tools.host import Host, read_text
from tools.wrapper_python import launcher_commands
from tools.wrapper_shell import ScriptCommand, script_commands

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
SHELL_OPTIONS_WITH_VALUE = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
# words that run the rest of the command as the program: `nohup vllm serve …`, `exec python …`, `env A=b x`
PREFIXES = frozenset({"exec", "nohup", "setsid", "command", "env", "time", "then", "do", "else", "{", "!", "if",
                      "while", "until", "stdbuf", "srun"})
INTERPRETER = re.compile(r"python[0-9.]*")
MAX_SCRIPT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Wrapped:
    """What medic read through a wrapper. ``server``/``client``: the commands as the script runs them."""

    script: str  # what was read: a file on the host, or "bash -c" for an inline script
    kind: str  # "shell" | "python" | "make"
    server: list[str] | None = None
    client: list[str] | None = None
    unseen: list[str] = field(default_factory=list)  # what the reading could not see

    @property
    def read_through(self) -> bool:
        return self.server is not None and self.client is not None and not self.unseen

    def as_dict(self) -> dict[str, object]:
        return {"script": self.script, "kind": self.kind, "server": self.server, "client": self.client,
                "unseen": self.unseen}


def program(words: Sequence[str]) -> list[str]:
    """The program a command runs and its arguments, without the words that only start it (``nohup``, ``exec``,
    ``env A=b``, a leading ``A=b``, a shell keyword, a launcher's own options)."""
    rest = list(words)
    while rest:
        head = posixpath.basename(rest[0])
        if head in PREFIXES or ("=" in rest[0] and not rest[0].startswith("-") and "/" not in rest[0].split("=")[0]):
            rest = rest[1:]
            while rest and head in ("env", "stdbuf", "srun") and (rest[0].startswith("-") or "=" in rest[0]):
                rest = rest[1:]
            continue
        break
    return rest


def is_interpreter_word(word: str) -> bool:
    return INTERPRETER.fullmatch(posixpath.basename(word)) is not None


def is_server(words: Sequence[str]) -> bool:
    """``vllm serve …``, ``python -m vllm…``, or speculators' ``launch_vllm.py``."""
    if not words:
        return False
    if posixpath.basename(words[0]) == "vllm":
        return len(words) > 1 and words[1] == "serve"
    if any(posixpath.basename(w) == hs_layouts.LAUNCHER for w in words[:3]):
        return True
    return is_interpreter_word(words[0]) and any(
        w == "-m" and i + 1 < len(words) and words[i + 1].split(".")[0] == "vllm" for i, w in enumerate(words))


def is_client(words: Sequence[str]) -> bool:
    return bool(words) and hs_layouts.client_of(list(words)) is not None


def wrapper_of(command: Sequence[str], workdir: str) -> tuple[str, str, list[str]] | None:
    """(kind, the script on the host or the inline text, its arguments) when ``command`` runs a wrapper medic can
    try to read: a shell script (``bash run.sh``, ``./run.sh``, ``sbatch run.sh``, ``bash -c '…'``), a Makefile
    target, a Python script (which may be a launcher). None for any other command."""
    words = list(command)
    if not words:
        return None
    head = posixpath.basename(words[0])
    if head in SHELLS or head == "sbatch":
        rest = words[1:]
        while rest and rest[0].startswith(("-", "+")):
            option = rest.pop(0)
            if option == "-c" and head in SHELLS:
                return ("inline", rest[0], rest[2:]) if rest else None
            if option in SHELL_OPTIONS_WITH_VALUE and head in SHELLS and rest:
                rest.pop(0)
            if head == "sbatch" and option.startswith("--wrap="):
                return "inline", option.partition("=")[2], []
        return ("shell", posixpath.join(workdir, rest[0]), rest[1:]) if rest else None
    if head == "make":
        return "make", posixpath.join(workdir, "Makefile"), words[1:]
    if is_interpreter_word(words[0]) and len(words) > 1 and words[1].endswith(".py"):
        return "python", posixpath.join(workdir, words[1]), words[2:]
    if words[0].endswith(".sh") or ("/" in words[0] and not words[0].endswith(".py")):
        return "shell", posixpath.join(workdir, words[0]), words[1:]
    return None


def read_wrapper(host: Host, command: Sequence[str], workdir: str, env: Mapping[str, str]) -> Wrapped | None:
    """The server and client a wrapper job runs, as far as medic can read them; None when ``command`` is no
    wrapper (or a Python script that starts no server: the job itself)."""
    found = wrapper_of(command, workdir)
    if found is None:
        return None
    kind, where, args = found
    name = "inline script" if kind == "inline" else where
    if kind == "make":
        return Wrapped(where, "make", unseen=[f"the commands of `{' '.join(command)}` (medic does not read "
                                              "Makefiles)"])
    if kind == "inline":
        text = where
    else:
        try:
            stat = host.stat(where)
            if stat is None or stat.is_dir or stat.size > MAX_SCRIPT_BYTES:
                return None if kind == "python" else Wrapped(where, kind, unseen=[f"the script {where} (not a "
                                                                                  "readable file)"])
            text = read_text(host, where)
        except MedicError as exc:
            return Wrapped(where, kind, unseen=[f"the script {where} ({exc})"])
    if kind == "python" or (kind == "shell" and text.startswith("#!") and "python" in text.split("\n", 1)[0]):
        started, unread = launcher_commands(text, env)
        commands = [ScriptCommand(tuple(words), line, True, tuple(unknown)) for words, line, unknown in started]
        if kind == "python" and not unread and not any(is_server(program(c.words)) for c in commands):
            return None  # a driver that starts no server: the job itself, nothing to read through
        return picked(where, "python", commands, unread)
    home = {**env, "PWD": workdir, "0": name}
    return picked(where, "shell", script_commands(text, home, args), [])


def picked(script: str, kind: str, commands: Sequence[ScriptCommand], unseen: list[str]) -> Wrapped:
    """The first server and the first client among ``commands``, and what was not seen of them."""
    server = next((c for c in commands if is_server(program(c.words))), None)
    client = next((c for c in commands if is_client(program(c.words))), None)
    missing = list(unseen) if server is None or client is None else []  # a runner read whole or not needed
    if server is None and client is None and not any(c.unresolved for c in commands):
        return Wrapped(script, kind, unseen=missing)  # a script that runs no server job (an in-process one)
    for what, cmd in (("server", server), ("client", client)):
        if cmd is None:
            missing.append(f"a {what} command (`vllm serve …`/`python -m vllm…`)" if what == "server" else
                           "a client command (`speculators generate-offline-data …`, data_generation_offline.py)")
        elif cmd.unresolved:
            where = f" (line {cmd.line})" if cmd.line else ""
            missing.append(f"the value of {', '.join(cmd.unresolved)} in the {what} command{where}")
    return Wrapped(script, kind, program(server.words) if server else None,
                   program(client.words) if client else None, list(dict.fromkeys(missing)))


def with_python(command: list[str] | None, python: str) -> list[str] | None:
    """A read command as the job's env runs it: a bare ``python`` is the target's (the env is first on PATH)."""
    if not command:
        return command
    return [python, *command[1:]] if command[0] in ("python", "python3") else command
