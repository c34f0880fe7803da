"""The user's command as the target runs it: which interpreter, which program, which driver script, which folders.

A command written ``python extract.py`` means the target env's python (``--python``), not whatever ``python``
comes first on the host's PATH; ``speculators …``, ``vllm serve …``, ``torchrun …`` mean the env's own program
(tools/env_scripts.py), activated or not; and a relative path in it is relative to the job's ``--workdir``, where the
job runs, not to the folder medic was started in.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agent.config import SessionConfig, Target
from agent.state import SessionState
from tools import env_scripts
from tools import source as src_tools
from tools.canary import build_canary
from tools.errors import MedicError, UsageError
from tools.host import Host, read_text
from tools.model_folder import ModelFolder, model_folders, on_host


class Background(Protocol):
    """What the canary's build asks of the session's deps (agent/deps.py): its target, its host, and work started
    now and awaited later — named here so this module stays below deps."""

    config: SessionConfig
    host: Host

    def in_background(self, name: str, work: Callable[[], Any]) -> None: ...

    def awaited(self, name: str) -> tuple[bool, Any]: ...

BARE_PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?")  # a name PATH would resolve: python, python3, python3.11
INTERPRETER = re.compile(r"python[0-9.]*")  # the basename of any CPython interpreter
# interpreter options whose value may be the next argument (``python --help``): never the script
VALUE_OPTIONS = frozenset("WX")
LONG_VALUE_OPTIONS = frozenset({"--check-hash-based-pycs"})
LOCAL_HOSTS = ("local", "localhost-direct")  # the names agent/session.py connects to this machine


def with_interpreter(command: Sequence[str], python: str) -> tuple[list[str], str | None]:
    """``command`` with a bare python name as argv[0] replaced by the target's ``python``, and the name it
    replaced (None when there was none to replace)."""
    words = list(command)
    if words and BARE_PYTHON.fullmatch(words[0]):
        return [python, *words[1:]], words[0]
    return words, None


def substituted(replaced: str | None, python: str) -> dict[str, dict[str, str | None]]:
    """For the trace: which bare interpreter name of the command was run as the target's python."""
    return {"interpreter": {"given": replaced, "ran": python}} if replaced else {}


def in_target_env(host: Host, command: Sequence[str], target: Target) -> tuple[list[str], dict[str, Any]]:
    """``command`` as the target env runs it, wherever medic starts one (a launch, the canary, the server, the
    validator): a bare python is ``--python``; a program of the env (a console script of one of its distributions,
    a file in its scripts folder) is that env's, never the host PATH's. The second value says for the trace what
    was replaced ({} when nothing was)."""
    words, replaced = with_interpreter(command, target.python)
    if replaced:
        return words, substituted(replaced, target.python)
    words, script = env_scripts.resolve(host, target.python, words, target.env)
    return words, {"script": script} if script else {}


def where_looked(host: Host, target: Target, name: str) -> str:
    """For a program the run could not find: where the target env was searched for it."""
    if "/" in name:
        if not host.exists(name):
            return f"there is no such file on {host.name}"
        try:  # the file is there: the interpreter its first line names is not (a venv moved or deleted)
            first = host.read_bytes(name, 0, 256).split(b"\n", 1)[0].decode(errors="replace")
        except MedicError:
            first = ""
        return (f"the file is there, but the interpreter its first line names is not: {first}"
                if first.startswith("#!") else f"{name} is there but {host.name} cannot run it")
    return env_scripts.lookup(host, target.python, name, target.env).describe(target.python)


def canary_commands(state: SessionState, config: SessionConfig) -> tuple[list[str] | None, list[str] | None]:
    """(run, validate) commands of the canary: given in the config, or derived by preflight."""
    target = config.target
    if target.canary_command:
        return target.canary_command, target.canary_validate_command
    derived = (state.get("preflight") or {}).get("canary") or {}
    return derived.get("command"), derived.get("validate")


def canary_env(state: SessionState, config: SessionConfig) -> dict[str, str]:
    """What the canary's runs set over the job's env (the variable that names the model folder, when one does)."""
    if config.target.canary_command:
        return {}
    return dict(((state.get("preflight") or {}).get("canary") or {}).get("env") or {})


def seen_through(target: Target, state: SessionState) -> Target:
    """The job as medic's checks read it: a wrapper medic read through (preflight, tools/wrapper.py) stands for
    the server and the client it runs, so the scan, the model folder and medic's own check see those two
    commands, as with ``--server``. The launch still runs the user's own command."""
    wrapped = (state.get("preflight") or {}).get("wrapped") or {}
    if target.server_command or not wrapped.get("client"):
        return target
    return target.model_copy(update={"command": list(wrapped["client"]),
                                     "server_command": list(wrapped["server"]) if wrapped.get("server") else None})


def job_model_folder(target: Target, host: Host) -> ModelFolder | None:
    """The job's model folder, however its command names it (tools/model_folder.py): ``--canary-model`` when
    given (a relative one is the workdir's), found where the job names it; else the first one the job names."""
    driver = driver_path(target, host)
    try:
        source = read_text(host, driver) if driver and host.exists(driver) else None
    except MedicError:
        source = None
    found = model_folders(host, target.command, target.workdir, target.env, source)
    if not target.model_dir:
        return found[0] if found else None
    given = on_host(target.model_dir, target.workdir).rstrip("/")
    return next((f for f in found if f.path == given), ModelFolder(given, target.model_dir, "command"))


def canary_folders(target: Target, host: Host) -> tuple[ModelFolder, str] | None:
    """(the model folder the canary is built from, the canary's folder), when the user named the model folder."""
    folder = job_model_folder(target, host) if target.model_dir else None
    if folder is None:
        return None
    return folder, f"{target.workdir}/.medic/canary/{folder.path.rstrip('/').rsplit('/', 1)[-1]}"


def start_canary_build(deps: Background, model: str, out: str) -> None:
    """Build the canary on a thread of its own: it imports torch and transformers in the target env (seconds to
    a minute) while the scan's probes read the library, and nothing before the canary's launch needs it."""
    python = deps.config.target.python
    deps.in_background("canary", lambda: build_canary(deps.host, python, model, out))


def canary_ready(deps: Background) -> None:
    """Wait for the canary's build (its error, if it failed, is raised here). A resumed session, whose preflight
    ran in another process, builds it now if it is not there (build_canary keeps a finished one)."""
    started, _ = deps.awaited("canary")
    found = None if started else canary_folders(deps.config.target, deps.host)
    if found is not None:
        build_canary(deps.host, deps.config.target.python, found[0].path, found[1])


def on_canary(state: SessionState, config: SessionConfig) -> bool:
    """The canary runs first, until its output is verified: each fault it finds costs no big-model load."""
    return bool(config.canary and canary_commands(state, config)[0] and not state.get("canary_done"))


def target_launches(state: SessionState) -> int:
    """Launches that cost a load of the target model (a server that crashed while loading cost one too)."""
    return sum(1 for launch in state.get("launches") or [] if launch.get("kind", "target") in ("target", "server"))


def is_interpreter(word: str, python: str) -> bool:
    return word == python or INTERPRETER.fullmatch(posixpath.basename(word)) is not None


def script_argument(command: Sequence[str], python: str) -> tuple[str, str] | None:
    """What the command runs: ("script", path as written) or ("module", name); None for ``-c``, stdin or a
    command that names no .py file. A command not started by an interpreter (torchrun, a launcher script)
    runs the first .py file it names."""
    words = list(command)
    if not words:
        return None
    if not is_interpreter(words[0], python):
        found = next((word for word in words if word.endswith(".py")), None)
        return ("script", found) if found else None
    rest = words[1:]
    while rest:
        word = rest.pop(0)
        if word == "--":
            return ("script", rest[0]) if rest and rest[0] != "-" else None
        if word in LONG_VALUE_OPTIONS:
            rest[:1] = []
            continue
        if word.startswith("--") or word == "-":
            if word == "-":
                return None
            continue  # --version and the like take no value
        if not word.startswith("-"):
            return "script", word
        for i, flag in enumerate(word[1:], start=2):  # a cluster: -uBm module, -W ignore, -Xdev
            value = word[i:]
            if flag == "c":
                return None
            if flag == "m":
                name = value or (rest[0] if rest else "")
                return ("module", name) if name else None
            if flag in VALUE_OPTIONS:
                if not value:
                    rest[:1] = []
                break
    return None


def driver_path(target: Target, host: Host | None = None) -> str | None:
    """The absolute path of the driver script the target's command runs, on the target host; None when it
    names none. A relative path is relative to ``target.workdir`` (the job's cwd). ``-m module`` is looked up
    in the target env (the workdir first, as ``python -m`` does) when ``host`` is given: a package runs its
    ``__main__.py``."""
    command, _ = with_interpreter(target.command, target.python)
    found = script_argument(command, target.python)
    if found is None:
        return None
    kind, value = found
    if kind == "script":
        return posixpath.normpath(posixpath.join(target.workdir, value))
    if host is None:
        return None
    try:
        path = src_tools.module_path(host, target.python, value, path_extra=[target.workdir])
    except MedicError:
        return None  # not importable there: the run will say so, the scan has nothing to read
    if path.endswith("/__init__.py"):
        path = path[: -len("__init__.py")] + "__main__.py"
    return path if path.endswith(".py") else None


def named_scripts(target: Target) -> list[tuple[str, str]]:
    """(what, path on the host) of each script file the job's command and its ``--validate`` name to run: the
    driver (``python extract.py``, ``torchrun extract.py``), the validator's script, or a program named by a path
    (``./check.sh``). Relative paths are the workdir's. A path holding a placeholder (``{shard}``) or a space (a
    ``sh -c`` string) names no one file, and ``-m module`` is the env's to find: those are left to the run."""
    found: list[tuple[str, str]] = []
    for what, command in (("driver", target.command), ("--validate script", target.validate_command)):
        if not command:
            continue
        words, _ = with_interpreter(command, target.python)
        named = script_argument(words, target.python)
        path = named[1] if named and named[0] == "script" else None
        if path is None and not is_interpreter(words[0], target.python) and "/" in words[0]:
            path = words[0]
        if path and not any(c in path for c in "{} \t\n"):
            found.append((what, posixpath.normpath(posixpath.join(target.workdir, path))))
    return found


def missing_script(host: Host, target: Target) -> str | None:
    """Why the job cannot start because a script it names is not there (one line), or None. Checked before
    anything is created: a run would only fail with "can't open file" after a launch."""
    for what, path in named_scripts(target):
        st = host.stat(path)
        if st is not None and st.is_symlink:  # a link must lead to a file
            st = host.stat(host.realpath(path))
        if st is None or st.is_dir:
            return f"the {what} {path} does not exist on {host.name} (or is a folder)"
    return None


def local_path(value: str, host: str) -> str:
    """A path given on the command line, as the Target wants it: on this machine (``host`` local) a relative
    path is relative to medic's cwd; a remote host has no cwd of medic's, so there it must be absolute."""
    if value.startswith("/") or host not in LOCAL_HOSTS:
        return value
    if not value:
        raise UsageError("an empty path is not a folder or a file: pass an absolute or relative path")
    return os.path.abspath(value)
