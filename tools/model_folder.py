"""Where a job's model folder is, however its command names it.

A model folder is a folder with a ``config.json`` that says what model it is (``architectures`` or
``model_type``). A job names it in one of these ways, looked for in this order:

- a word of the command: the value of a model-named option (``--model x``, ``--model=x``), of any other option,
  or a bare argument (``python x.py tiny out.pt``); a relative one is the workdir's, where the job runs;
- the default of an option the driver's own argparse defines and the command does not give
  (``parser.add_argument("--model", default="tiny")``), read from the driver's source without running it;
- a value of the job's environment (``--env MODEL_DIR=tiny``).

Each candidate costs one ``exists`` on the host, so at most MAX_CANDIDATES are tried.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tools import pysyntax
from tools.errors import MedicError
from tools.host import Host, read_text

MODEL_OPTION = re.compile(
    r"^--?(?:model|(?:base|target|verifier)[-_]model)(?:[-_](?:path|dir|name(?:[-_]or[-_]path)?))?$")
MAX_CANDIDATES = 24


@dataclass(frozen=True)
class ModelFolder:
    path: str  # absolute, on the job's host
    named: str  # as the job names it: the word, the default, the variable's value
    via: Literal["command", "default", "env"]
    key: str = ""  # the driver's option whose default it is, or the variable that holds it


def option_values(command: Sequence[str], pattern: re.Pattern[str]) -> list[str]:
    """Values of the options whose name matches ``pattern``: ``--opt VALUE`` and ``--opt=VALUE``."""
    values = []
    for i, arg in enumerate(command):
        name, eq, value = arg.partition("=")
        if not pattern.match(name):
            continue
        if eq:
            values.append(value)
        elif i + 1 < len(command) and not command[i + 1].startswith("-"):
            values.append(command[i + 1])
    return values


def command_words(command: Sequence[str]) -> list[str]:
    """Every value the command passes, model-named options' first: ``--opt=v``'s v and each bare word."""
    named = option_values(command, MODEL_OPTION)
    rest = [arg.partition("=")[2] if arg.startswith("-") else arg for arg in command[1:]]
    return list(dict.fromkeys(w for w in [*named, *rest] if w and not w.startswith("-")))


def argparse_defaults(driver_source: str) -> dict[str, str]:
    """{option: default} of the driver's ``add_argument("--opt", default="...")`` calls with a string default,
    model-named options first. Read from the source: the driver is never run for it."""
    try:
        tree = pysyntax.parse(driver_source)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                 and a.value.startswith("-")]
        default = next((k.value.value for k in node.keywords if k.arg == "default"
                        and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)), None)
        if flags and default:
            found[max(flags, key=len)] = default
    return dict(sorted(found.items(), key=lambda item: not MODEL_OPTION.match(item[0])))


def given(command: Sequence[str], option: str) -> bool:
    return any(arg == option or arg.startswith(option + "=") for arg in command)


def candidates(command: Sequence[str], env: Mapping[str, str], driver_source: str | None
               ) -> list[tuple[str, Literal["command", "default", "env"], str]]:
    """(as named, how, key) of each value that may name the model folder, in the order they are tried."""
    out: list[tuple[str, Literal["command", "default", "env"], str]] = [
        (word, "command", "") for word in command_words(command)]
    defaults = argparse_defaults(driver_source) if driver_source else {}
    out += [(value, "default", option) for option, value in defaults.items() if not given(command, option)]
    out += [(value, "env", var) for var, value in env.items() if value and "://" not in value]
    return out[:MAX_CANDIDATES]


def on_host(path: str, workdir: str) -> str:
    return path if path.startswith("/") else posixpath.normpath(posixpath.join(workdir, path))


def is_model_folder(host: Host, path: str) -> bool:
    config = f"{path.rstrip('/')}/config.json"
    if not host.exists(config):
        return False
    try:
        data = json.loads(read_text(host, config))
    except (MedicError, ValueError):
        return False
    return isinstance(data, dict) and bool(data.get("architectures") or data.get("model_type"))


def model_folders(host: Host, command: Sequence[str], workdir: str, env: Mapping[str, str] | None = None,
                  driver_source: str | None = None) -> list[ModelFolder]:
    """Every model folder the job names, in the order above (one folder once)."""
    found: dict[str, ModelFolder] = {}
    for named, via, key in candidates(command, env or {}, driver_source):
        path = on_host(named, workdir).rstrip("/") or "/"
        if path not in found and is_model_folder(host, path):
            found[path] = ModelFolder(path, named, via, key)
    return list(found.values())


def architectures(host: Host, folder: str) -> tuple[str, ...]:
    """The ``architectures`` a model folder's config.json names (what the library will build)."""
    try:
        data = json.loads(read_text(host, f"{folder.rstrip('/')}/config.json"))
    except (MedicError, ValueError):
        return ()
    archs = data.get("architectures") if isinstance(data, dict) else None
    return tuple(a for a in archs or [] if isinstance(a, str))
