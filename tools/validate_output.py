"""medic's built-in validator, and how any validator's verdict is read.

When no ``--validate`` is given, medic checks the output itself: a speculators ≥ 0.5 client's folder of
safetensors records with tools/hs_output_check.py (tools/hs_job.py finds what it needs in the client's and the
server's commands), anything else with tools/output_check.py (shipped with medic,
run by the TARGET python, its text sent on stdin) needs the output file and the model folder. They come from
the target's config (``output``, ``model_dir``) or from the job's own command line: the value of an option
named for an output (``--out``, ``--output``, ``--save-path``, ``-o``…) that now exists, else an argument
that is an existing ``.pt`` file; the value of a ``--model``-like option, else any argument, that is a folder
with a ``config.json``. Relative paths are the workdir's.

Any validator's output is evidence; the lines that say what failed come first (the validator's own
``problems``, then exception lines, then lines that report a failure), then the lines that do not say they
passed, its "ok" lines last.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from tools.check_command import BuiltinCheck
from tools.errors import MedicError
from tools.host import Host, read_text
from tools.hs_job import hs_builtin_check
from tools.model_folder import argparse_defaults, model_folders, on_host, option_values

SCRIPT = "output_check.py"
OUTPUT_OPTION = re.compile(r"^--?(?:o|(?:out|output|save)(?:[-_]\w+)*)$")
OUTPUT_SUFFIXES = (".pt", ".pth")
# the job's own option for the layers it extracts (--layers 2,4,6, --layer-ids 2 4 6, --target-layer-ids=2,4):
# medic's check then names each tensor by its id, where an output without ids leaves it the tensor's place
LAYERS_OPTION = re.compile(r"^--?(?:target[-_])?layers?(?:[-_]ids?)?$")
ID_WORD = re.compile(r"^\d+(?:\s*,\s*\d+)*,?$")
EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Failure|Mismatch)\b")
FAILING_LINE = re.compile(
    r"(?i)\b(?:fail\w*|wrong|errors?|mismatch\w*|differ\w*|expected|assert\w*|not ok|not verified|unverified|"
    r"invalid|missing|nan|exceed\w*|too (?:short|long|large|small)|unreadable|cannot)\b")
# a line that reports a check that passed ("ok: …", "PASS seq 3", "layer 2 … ok"): never evidence of a failure
PASSING_LINE = re.compile(r"(?i)^(?:ok|pass(?:ed)?|good|[✓✔])\b|\b(?:ok|passed|[✓✔])\.?$")
CONTEXT_LINE = re.compile(r'^(?:Traceback \(most recent call last\):|File ".*", line \d+)')
# what a library says on the side (Python's warnings: "file.py:3: DeprecationWarning: …" and the source line it
# echoes, a logger's "WARNING …"): noise around a verdict, never the verdict, whatever words it uses
WARNING_LINE = re.compile(r"^(?:\S+:\d+: )?\w*Warning: |^\[?WARN(?:ING)?\]?[\s:]|^\S+ - WARNING - ")
MAX_EVIDENCE = 40


def output_words(command: Sequence[str]) -> list[str]:
    """The words of a job's command that name what it writes: an output option's value, a ``.pt`` argument."""
    return list(dict.fromkeys([*option_values(command, OUTPUT_OPTION),
                               *(a for a in command[1:] if a.endswith(OUTPUT_SUFFIXES) and not a.startswith("-"))]))


def locate(host: Host, command: Sequence[str], workdir: str, *, output: str | None = None,
           model_dir: str | None = None, env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(output, model folder) of a job, each None where nothing names one that exists."""
    if output is None:
        output = next((p for p in (on_host(a, workdir) for a in output_words(command)) if host.exists(p)), None)
    else:
        output = on_host(output, workdir)
    if model_dir is None:  # however the command (or its env) names it: tools/model_folder.py
        model_dir = next((f.path for f in model_folders(host, command, workdir, env)), None)
    else:
        model_dir = on_host(model_dir, workdir)
    return output, model_dir


def builtin_check(host: Host, python: str, command: Sequence[str], workdir: str, *, output: str | None = None,
                  model_dir: str | None = None, env: Mapping[str, str] | None = None,
                  server_command: Sequence[str] | None = None) -> BuiltinCheck | str:
    """The command of medic's own check for this job, or why there is none (what medic could not find). A
    speculators ≥ 0.5 client's folder of safetensors records has a check of its own (tools/hs_job.py)."""
    served = hs_builtin_check(host, python, command, workdir, server_command=server_command, output=output,
                              model_dir=model_dir)
    if served is not None:
        return served
    found_output, found_model = locate(host, command, workdir, output=output, model_dir=model_dir, env=env)
    if not (found_output and found_model):
        return not_found_line(command, output=bool(found_output), model=bool(found_model))
    assert found_output is not None and found_model is not None
    script = resources.files("tools").joinpath(SCRIPT).read_text(encoding="utf-8")
    layers = named_layer_ids(command, driver_source(host, command, workdir))
    return BuiltinCheck([python, "-", found_output, "--model", found_model, "--json",
                         *(["--layers", ",".join(map(str, layers))] if layers else [])], script, found_output,
                        found_model)


def named_layer_ids(command: Sequence[str], source: str | None = None) -> list[int] | None:
    """The layer ids the job's command gives its extractor (else its driver's argparse default for that
    option, read from ``source``), or None where neither names any."""
    given = [(i, arg.partition("=")) for i, arg in enumerate(command) if LAYERS_OPTION.match(arg.partition("=")[0])]
    defaults = [[value] for option, value in argparse_defaults(source or "").items() if LAYERS_OPTION.match(option)]
    for words in [[value] if eq else list(itertools.takewhile(ID_WORD.match, command[i + 1:]))
                  for i, (_, eq, value) in given] + ([] if given else defaults):
        ids = [part for word in words for part in re.split(r"[,\s]+", word) if part]
        if ids and all(part.isdigit() for part in ids):
            return [int(part) for part in ids]
    return None


def driver_source(host: Host, command: Sequence[str], workdir: str) -> str | None:
    """The text of the command's Python script, where it names one that is on the host."""
    script = next((word for word in command[1:] if word.endswith(".py")), None)
    if script is None:
        return None
    try:
        return read_text(host, on_host(script, workdir))
    except (MedicError, OSError, UnicodeDecodeError):
        return None


# what `medic run` takes to name each, when the command does not say it so medic can find it
OUTPUT_HINT = "the output file (--output PATH names it)"
MODEL_HINT = "a model folder with a config.json (--canary-model DIR names it)"


def not_found_line(command: Sequence[str], *, output: bool, model: bool) -> str:
    """Why medic cannot check a job's output itself: what it did not find, and the option that names it."""
    where = f"in `{shlex.join(command)[:200]}`"
    if not (output or model):
        return f"medic found neither {OUTPUT_HINT} nor {MODEL_HINT} {where}"
    return f"medic found no {MODEL_HINT.removeprefix('a ') if output else OUTPUT_HINT.removeprefix('the ')} {where}"


def evidence_lines(report: Mapping[str, Any], stdout: str, stderr: str) -> list[str]:
    """The validator's output, the lines that say what failed first."""
    lines, noise = said_lines(stdout, stderr)
    # a validator's lines in its own words: those that fail first, then those that do not say they passed,
    # its passing lines ("ok …", mostly) after, the warnings around them last
    ordered = [*failing_lines(report, stdout, stderr), *(line for line in lines if not PASSING_LINE.search(line)),
               *lines, *noise]
    return distinct(ordered)[:MAX_EVIDENCE]


def failing_lines(report: Mapping[str, Any], stdout: str, stderr: str) -> list[str]:
    """The lines in which the validator says what failed (its own problems, exceptions, failure words): what
    a fault's summary quotes. No warning is one, whatever words it uses."""
    problems = [str(p).strip() for p in report.get("problems") or [] if str(p).strip()]
    lines = said_lines(stdout, stderr)[0]
    exceptions = [line for line in lines if EXCEPTION_LINE.match(line)]
    failing = [line for line in lines if FAILING_LINE.search(line) and not CONTEXT_LINE.match(line)]
    return distinct([*problems, *exceptions[::-1], *failing])


def said_lines(stdout: str, stderr: str) -> tuple[list[str], list[str]]:
    """(the validator's lines, the warnings among them, each with the source line Python echoes after it)."""
    lines: list[str] = []
    noise: list[str] = []
    echo = False
    for raw in (stderr + "\n" + stdout).splitlines():
        line = raw.strip()
        if not line or line.startswith("{"):  # the JSON report is read, not quoted
            continue
        warned = bool(WARNING_LINE.match(line))
        (noise if warned or (echo and raw.startswith(" ")) else lines).append(line)
        echo = warned
    return lines, noise


def distinct(ordered: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for line in ordered:
        if not any(known in line for known in seen):  # "WRONG: x" says no more than x
            seen[line] = None
    return list(seen)
