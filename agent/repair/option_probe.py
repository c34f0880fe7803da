"""Asks the target env which value of a job's option takes another branch of a library's choice.

Run by the target's python with the job's environment, so it answers for the host the job runs on (and the CPU
flags that host reports): the library's own CLI (the engine-args class's ``add_cli_args``) names each config field's
option and the values it accepts; the current platform's code says what an unset field becomes
(``if cache_config.block_size is None: cache_config.block_size = 128``); the choice function itself says which way
each value goes. Prints one JSON line after ``MARK``.
"""

from __future__ import annotations

import json
from typing import Any

from agent.repair.types import RepairContext
from tools.errors import SourceError

MARK = "@@option-probe@@ "
PROBE_TIMEOUT = 600.0  # importing the library is most of it; minutes on a loaded host


def run_probe(ctx: RepairContext, script: str, spec: dict[str, Any], what: str) -> dict[str, Any]:
    """The JSON line after ``MARK`` that ``script`` prints, run by the target's python with the job's environment
    (``spec`` its argument); SourceError saying it did not say ``what`` otherwise."""
    result = ctx.host.run([ctx.python, "-B", "-c", script, json.dumps(spec)], timeout=PROBE_TIMEOUT,
                          env=ctx.job_env or None)
    reply = next((line[len(MARK):] for line in result.stdout.splitlines() if line.startswith(MARK)), None)
    if reply is None:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise SourceError(f"{ctx.python} did not say {what} (exit {result.exit_code}): {tail}")
    return dict(json.loads(reply))

# The library's own CLI, as its engine-args classes build it (also asked by agent/repair/derived_named_option.py).
CLI_ACTIONS = r'''
import argparse, importlib, inspect


def cli_actions(package):
    """Each option of each engine-args class the library builds its CLI with, in the order they add them."""
    module = importlib.import_module(package + ".engine.arg_utils")
    found = []
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__ or not hasattr(cls, "add_cli_args"):
            continue
        parser = argparse.ArgumentParser(add_help=False)  # one each: a subclass adds its base's options again
        try:
            cls.add_cli_args(parser)
        except Exception:  # e.g. an argparse keyword this Python lacks: the options added before it still count
            pass
        found += [a for a in parser._actions if a.option_strings]
    return found
'''

PROBE = CLI_ACTIONS + r'''
import ast, json, math, sys

spec = json.loads(sys.argv[1])
choose = getattr(importlib.import_module(spec["module"]), spec["function"])
params = inspect.signature(choose).parameters
package = spec["module"].split(".")[0]


def cli_options():
    """dest -> (option, choices, default)."""
    found = {}
    for a in cli_actions(package):
        if a.dest not in found:
            found[a.dest] = (next((o for o in a.option_strings if o.startswith("--")), None), a.choices, a.default)
    return found


def platform_fills(field):
    """The constant the current platform's code gives ``X.field`` when it is None."""
    platform = importlib.import_module(package + ".platforms").current_platform
    tree = ast.parse(inspect.getsource(sys.modules[type(platform).__module__]))
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Attribute)
                and test.left.attr == field and isinstance(test.ops[0], ast.Is)):
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Attribute)
                        and stmt.targets[0].attr == field and isinstance(stmt.value, ast.Constant)):
                    return stmt.value.value
    return None


def as_param(param, value):
    """A CLI value as the choice function takes it: a typed parameter (``torch.dtype``) gets the attribute of that
    name of the type's package; None when the value names nothing of that type ("auto")."""
    kind = params[param].annotation
    if isinstance(value, str) and inspect.isclass(kind) and kind.__module__ != "builtins":
        found = getattr(importlib.import_module(kind.__module__.split(".")[0]), value.removeprefix(
            kind.__module__.split(".")[0] + "."), None)
        return found if isinstance(found, kind) else None
    return value


def from_command(option):
    command = spec["command"]
    for i, arg in enumerate(command):
        if arg == option and i + 1 < len(command):
            return command[i + 1]
        if option and arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def nearest_first(values, current):
    if all(isinstance(v, int) and v > 0 for v in [*values, current]):
        return sorted(values, key=lambda v: (abs(math.log2(v / current)), v))
    return list(values)


options = cli_options()
known = {p: int(v) if str(v).isdigit() else v for p, v in spec["known"].items()}
controlled, fixed = [], dict(known)
for inp in spec["inputs"]:
    option, choices, default = options.get(inp["field"], (None, None, None))
    # the job's code (an in-process job's keyword), else its command, else what the fault's log says the engine ran
    # with — the first that names a value ("auto" names none) — else what an unset one becomes
    said = [spec["given"].get(inp["field"]), from_command(option), spec["logged"].get(inp["field"])]
    current = next((v for v in said if v is not None and as_param(inp["param"], v) is not None), None)
    if current is None:
        current = platform_fills(inp["field"]) if default is None else default
    if isinstance(current, str) and current.isdigit():
        current = int(current)
    if option and choices and current is not None:
        controlled.append((inp, option, list(choices), current))
    if current is not None and inp["param"] not in fixed:
        fixed[inp["param"]] = current
args = {p: as_param(p, v) for p, v in fixed.items() if p in params}
now = choose(**args)
tried, ways = [], []
# one option changed at a time; a field of the model's own config last (it changes the numbers a job extracts);
# the first value of each other answer, so a way that fails too at the relaunch makes room for the next
for inp, option, choices, current in sorted(controlled, key=lambda c: "model" in c[0]["source"]):
    for value in nearest_first([c for c in choices if c != current], current):
        typed = as_param(inp["param"], value)
        if typed is None:
            continue
        answer = str(choose(**{**args, inp["param"]: typed}))
        tried.append({"option": option, "value": str(value), "answer": answer})
        if answer != str(now) and answer not in {w["answer"] for w in ways}:
            ways.append({"option": option, "field": inp["field"], "value": str(value), "current": str(current),
                         "answer": answer})
print("@@option-probe@@ " + json.dumps({"now": str(now), "ways": ways, "tried": tried,
                                        "inputs": {p: str(v) for p, v in fixed.items()}}))
'''
