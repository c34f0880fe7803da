"""A stop that is the model folder's own disagreement: its checkpoint holds a weight that the library's model class
builds only under a config value the folder's ``config.json`` does not give.

vLLM's DeepSeek MoE block makes ``gate.e_score_correction_bias`` only ``if getattr(config, "topk_method", None) ==
"noaux_tc"``; a checkpoint saved with that bias beside a config that does not say so dies in ``load_weights`` with
``KeyError: 'layers.1.mlp.gate.e_score_correction_bias'``. The model folder is the user's: no change medic may make
reaches it. The stop names the line that builds the weight, its condition, and what the config gives; it is claimed
only when the condition, read from the installed source and evaluated on the folder's own config, is false.
"""

from __future__ import annotations

import ast
import json
import re
import types

from agent.repair.context import read_source
from agent.repair.limits import in_library, installed_version, library_of
from agent.repair.types import Fault, RepairContext
from tools.errors import MedicError
from tools.host import read_text
from tools.pysyntax import compile_expression

KEY = re.compile(r"^'(?P<key>[\w.]+)'$")
SAFE = {"getattr": getattr, "hasattr": hasattr, "isinstance": isinstance, "str": str, "int": int, "None": None}


def missing_key(fault: Fault) -> str | None:
    """The dotted name a ``KeyError`` quotes (a checkpoint weight's, when the load looked it up)."""
    said = KEY.match(fault.message.strip()) if fault.exc_type.split(".")[-1] == "KeyError" else None
    return said["key"] if said else None


def unbuilt_weight(ctx: RepairContext, fault: Fault, model_dir: str | None) -> str | None:
    """The stop's sentence when the checkpoint's weight is one the model class does not build under this config."""
    key = missing_key(fault)
    if key is None or not model_dir:
        return None
    attr = key.rsplit(".", 1)[-1]
    config = folder_config(ctx, model_dir)
    for frame in reversed(fault.frames):
        library = library_of(ctx, frame.file)
        src = read_source(ctx, frame.file) if library else None
        for test, line in guarded_weights(src.tree, attr) if src else []:
            if config is None or holds(test, config) is not False:
                continue
            read = sorted(config_fields(test))
            gives = ", ".join(f"{name}={config.get(name)!r}" for name in read) or "nothing it reads"
            version = installed_version(ctx, library or "")
            return (f"the model folder disagrees with itself: its checkpoint holds {key!r}, which "
                    f"{library}{' ' + version if version else ''} builds only when `{ast.unparse(test)}` "
                    f"({in_library(library or '', frame.file)}:{line}), and its config.json gives {gives} — the "
                    f"folder is yours: medic changes no model file; save the config the checkpoint was trained "
                    f"with, or a checkpoint without that weight")
    return None


def guarded_weights(tree: ast.AST, attr: str) -> list[tuple[ast.expr, int]]:
    """Each ``if <test>:`` whose own body makes a parameter named ``attr`` (``….attr = nn.Parameter(…)``)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
                continue
            named = [t for t in stmt.targets if isinstance(t, ast.Attribute) and t.attr == attr]
            if named and callee(stmt.value).endswith("Parameter"):
                found.append((node.test, stmt.lineno))
    return found


def callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def config_fields(test: ast.expr) -> set[str]:
    """The config fields a condition reads: ``config.X`` and ``getattr(config, "X", …)``."""
    fields = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id == "config"}
    for n in ast.walk(test):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr") \
                and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str):
            fields.add(n.args[1].value)
    return fields


def holds(test: ast.expr, config: dict[str, object]) -> bool | None:
    """The condition on the folder's config (None: it reads something else, so nothing is claimed)."""
    if not config_fields(test):
        return None
    try:  # the installed library's own expression, with nothing but the config and a few builtins in reach
        value = eval(compile_expression(test, "<guard>"), {"__builtins__": {}},
                     {**SAFE, "config": types.SimpleNamespace(**config)})
    except Exception:  # it reads a name or does a thing this cannot: not proven
        return None
    return bool(value)


def folder_config(ctx: RepairContext, model_dir: str) -> dict[str, object] | None:
    try:
        data = json.loads(read_text(ctx.host, model_dir.rstrip("/") + "/config.json"))
    except (MedicError, ValueError):
        return None
    return data if isinstance(data, dict) else None
