"""What the kept remedies make of the job's environment and command line. An env remedy is part of a Patch
(tools/diffs.py ``EnvEdit``, ``ArgEdit``): it is applied by launching with it and reverted by dropping the patch,
so the job's environment is always the user's ``--env`` plus the env edits of the patches kept, in the order they
were kept, and its command the user's with the kept options set on it.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from tools.diffs import ArgEdit, EnvEdit
from tools.host import Host


def env_edits(patches: Sequence[Mapping[str, Any]]) -> list[EnvEdit]:
    """The env edits of the kept patches (state dicts), oldest first."""
    return [EnvEdit.model_validate(e) for p in patches for e in (p.get("patch") or {}).get("env") or ()]


def arg_edits(patches: Sequence[Mapping[str, Any]], command: str = "job") -> list[ArgEdit]:
    """The command-option edits of the kept patches for the job's (or its server's) command, oldest first."""
    edits = [ArgEdit.model_validate(a) for p in patches for a in (p.get("patch") or {}).get("args") or ()]
    return [a for a in edits if a.command == command]


def with_options(command: Sequence[str], edits: Sequence[ArgEdit]) -> list[str]:
    """``command`` with each option set: its value replaced where the command gives the option (``--opt v`` or
    ``--opt=v``), else the option added at the end, where a CLI's own options go. A switch goes last, once: the last
    of a switch and its opposite wins on an argparse command line."""
    out = list(command)
    for edit in edits:
        at = next((i for i, arg in enumerate(out) if arg == edit.option or arg.startswith(edit.option + "=")), None)
        if edit.value is None:
            out = [arg for arg in out if arg != edit.option] + [edit.option]
            continue
        if at is None:
            out += [edit.option, edit.value]
        elif out[at] == edit.option and at + 1 < len(out):
            out[at + 1] = edit.value
        else:
            out[at] = f"{edit.option}={edit.value}"
    return out


def job_env(host: Host, base: Mapping[str, str], edits: Sequence[EnvEdit]) -> tuple[dict[str, str], list[str]]:
    """(variables to export, variables to unset) for a launch. A prepend to a variable the user did not set
    starts from the host's own value, read there, so the job keeps what its login environment had."""
    env, unset = dict(base), []
    for edit in edits:
        if edit.action == "unset":
            env.pop(edit.var, None)
            unset.append(edit.var)
            continue
        if edit.var in unset:
            unset.remove(edit.var)
        if edit.action == "set":
            env[edit.var] = edit.value
            continue
        current = env.get(edit.var)
        if current is None:
            current = host_value(host, edit.var)
        parts = [edit.value, *[p for p in current.split(":") if p and p != edit.value]]
        env[edit.var] = ":".join(parts)
    return env, unset


def host_value(host: Host, var: str) -> str:
    """``var`` as the host's own environment has it ("" when unset): what a launch inherits unless medic sets it."""
    return host.run(["sh", "-c", f'printf %s "${{{var}}}"'], timeout=30).stdout


# One question to the host: the PATH a launch inherits, and whether the target python's folder is a venv's or a
# conda env's (a bare system python has no activation: its folder is not put first).
ENV_KIND_SH = ('printf "%s\\n" "$PATH"; [ -f "$1/pyvenv.cfg" ] && echo venv; '
               '[ -d "$1/conda-meta" ] && echo conda; exit 0')


def activated(host: Host, python: str, env: Mapping[str, str]) -> dict[str, str]:
    """What activating the target env sets (``VIRTUAL_ENV``/``CONDA_PREFIX``, its bin folder first on ``PATH``),
    over ``env``: a job that is the user's own script runs ``python``, ``vllm``, ``speculators`` as the env's, not
    the host's. The folder is the one the python was named in (a venv's bin/python is often a symlink out)."""
    bin_dir = posixpath.dirname(python)
    root = posixpath.dirname(bin_dir)
    answer = host.run(["sh", "-c", ENV_KIND_SH, "sh", root], timeout=30)
    lines = answer.stdout.splitlines()
    kinds = set(lines[1:])
    if not answer.ok or not lines or not kinds:
        return {}
    path = env.get("PATH") or lines[0]
    out = {"PATH": ":".join([bin_dir, *(p for p in path.split(":") if p and p != bin_dir)])}
    var = "VIRTUAL_ENV" if "venv" in kinds else "CONDA_PREFIX"
    if var not in env:
        out[var] = root
    return out


def with_unset(command: Sequence[str], unset: Sequence[str]) -> list[str]:
    """``command`` run with ``unset`` removed from its environment (POSIX ``env -u``)."""
    if not unset:
        return list(command)
    return ["env", *[arg for var in unset for arg in ("-u", var)], *command]


def run_your_job_with(patches: Sequence[Mapping[str, Any]], commands: Mapping[str, Sequence[str]] | None = None
                      ) -> str | None:
    """The shell lines a person needs to run the job without medic, or None when no env or option remedy was
    kept: the exports, then each command (``commands``: "job", "server") that takes a kept option, as medic ran it."""
    edits = env_edits(patches)
    lines = [e.describe() if e.action == "unset" else f"export {e.describe()}" for e in edits]
    for which, command in (commands or {}).items():
        options = arg_edits(patches, which)
        if options and command:
            lines.append(shlex.join(with_options(command, options)))
        elif options:
            lines.append(f"# the {which}'s command with " + " ".join(o.describe() for o in options))
    return "\n".join(lines) or None
