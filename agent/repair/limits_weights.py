"""A stop that is the model folder's own disagreement: its checkpoint holds a weight that the library's model class
builds only under a config value the folder's ``config.json`` does not give.

vLLM's DeepSeek MoE block makes ``gate.e_score_correction_bias`` only ``if getattr(config, "topk_method", None) ==
"noaux_tc"``; a checkpoint saved with that bias beside a config that does not say so dies in ``load_weights`` with
``KeyError: 'layers.1.mlp.gate.e_score_correction_bias'``. The model folder is the user's: no change medic may make
reaches it. The stop names the line that builds the weight, its condition, and what the config gives; it is claimed
only when the condition, read from the installed source and evaluated on the folder's own config, is false.

The folder may also not fit the model class at all: the class reads a config field the folder's ``config.json`` does
not give and its config class has no default for (``'HunYuanMoEV1Config' object has no attribute
'moe_intermediate_size'``): claimed only where a library frame's failing line reads that field from a config.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import types
from collections.abc import Iterator

from agent.repair.context import read_source
from agent.repair.edits import Source, callee_name
from agent.repair.limits import in_library, installed_version, library_of
from agent.repair.types import Fault, FrameRef, RepairContext
from tools.errors import MedicError
from tools.host import read_text
from tools.pysyntax import compile_expression

KEY = re.compile(r"^'(?P<key>[\w.]+)'$")
CONFIG_ATTR = re.compile(r"^'(?P<cls>\w*Config)' object has no attribute '(?P<field>\w+)'")
MODULE_WEIGHTS = ("weight", "bias")  # what a module (a norm, a linear layer) registers itself
SAFE = {"getattr": getattr, "hasattr": hasattr, "isinstance": isinstance, "str": str, "int": int, "None": None}


def missing_key(fault: Fault) -> str | None:
    """The dotted name a ``KeyError`` quotes (a checkpoint weight's, when the load looked it up)."""
    said = KEY.match(fault.message.strip()) if fault.exc_type.split(".")[-1] == "KeyError" else None
    return said["key"] if said else None


def config_field(fault: Fault) -> tuple[str, str] | None:
    """The config class and the field an ``AttributeError`` says it lacks."""
    said = CONFIG_ATTR.match(fault.message.strip()) if fault.exc_type.split(".")[-1] == "AttributeError" else None
    return (said["cls"], said["field"]) if said else None


def unbuilt_weight(ctx: RepairContext, fault: Fault, model_dir: str | None) -> str | None:
    """The stop's sentence when the checkpoint's weight is one the model class does not build under this config."""
    key = missing_key(fault)
    if key is None or not model_dir:
        return None
    config = folder_config(ctx, model_dir)
    for frame, library, src in library_sources(ctx, fault):
        for test, line in guarded_weights(src.tree, key):
            test = with_own_attributes(src.tree, test, line)
            if config is None or holds(test, config) is not False:
                continue
            read = sorted(config_fields(test))
            gives = ", ".join(f"{name}={config.get(name)!r}" for name in read) or "nothing it reads"
            version = installed_version(ctx, library)
            return (f"the model folder disagrees with itself: its checkpoint holds {key!r}, which "
                    f"{library}{' ' + version if version else ''} builds only when `{ast.unparse(test)}` "
                    f"({in_library(library, frame.file)}:{line}), and its config.json gives {gives} — the "
                    f"folder is yours: medic changes no model file; save the config the checkpoint was trained "
                    f"with, or a checkpoint without that weight")
    return None


def unset_field(ctx: RepairContext, fault: Fault, model_dir: str | None) -> str | None:
    """The stop's sentence when the library's model class reads a config field the model folder's config.json does
    not give and its config class has no default for (``'HunYuanMoEV1Config' object has no attribute
    'moe_intermediate_size'``), read at the failing line of a library frame."""
    said = config_field(fault)
    config = folder_config(ctx, model_dir) if said and model_dir else None
    if said is None or config is None or said[1] in config:
        return None
    config_class, field = said
    for frame, library, src in library_sources(ctx, fault):
        if not any(isinstance(n, ast.Attribute) and n.attr == field and n.lineno == frame.line
                   and "config" in ast.unparse(n.value).lower() for n in ast.walk(src.tree)):
            continue
        version = installed_version(ctx, library)
        where = f"{in_library(library, frame.file)}:{frame.line}: `{src.line(frame.line).strip()}`"
        return (f"the model folder does not fit the model class: {library}{' ' + version if version else ''} reads "
                f"config.{field} ({where}), which the folder's config.json does not give and {config_class} has no "
                f"default for — the folder is yours: medic changes no model file; save the config the checkpoint "
                f"was trained with (it names {field}), or use a {library} whose model class reads what this folder "
                f"gives")
    return None


def library_sources(ctx: RepairContext, fault: Fault) -> Iterator[tuple[FrameRef, str, Source]]:
    """The fault's frames in the library's own code, innermost first, each with its library and its source."""
    for frame in reversed(fault.frames):
        library = library_of(ctx, frame.file)
        src = read_source(ctx, frame.file) if library else None
        if library and src is not None:
            yield frame, library, src


def guarded_weights(tree: ast.AST, key: str) -> list[tuple[ast.expr, int]]:
    """Each ``if <test>:`` whose own body makes the weight ``key`` names: a parameter of its last name
    (``….bias = nn.Parameter(…)``), or the module of the name before a module's own ``weight``/``bias``
    (``self.key_layernorm = RMSNorm(…)``)."""
    names = key.split(".")
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
                continue
            made = {t.attr for t in stmt.targets if isinstance(t, ast.Attribute)}
            parameter = names[-1] in made and (callee_name(stmt.value) or "").endswith("Parameter")
            module = len(names) > 1 and names[-1] in MODULE_WEIGHTS and names[-2] in made
            if parameter or module:
                found.append((node.test, stmt.lineno))
    return found


def with_own_attributes(tree: ast.AST, test: ast.expr, line: int) -> ast.expr:
    """``test`` with each ``self.X`` it reads replaced by what the enclosing class assigned it before ``line``
    (``self.use_qk_norm = getattr(config, "use_qk_norm", False)``): the condition as the config decides it."""
    owner = next((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                  and c.lineno <= line <= (c.end_lineno or c.lineno)), None)
    if owner is None:
        return test
    given: dict[str, ast.expr] = {}  # the last assignment before ``line`` wins
    for stmt in sorted((n for n in ast.walk(owner) if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
        if stmt.lineno < line and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                given[target.attr] = stmt.value

    class Given(ast.NodeTransformer):
        def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
            own = isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in given
            return given[node.attr] if own else self.generic_visit(node)  # type: ignore[return-value]

    return Given().visit(copy.deepcopy(test))


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
