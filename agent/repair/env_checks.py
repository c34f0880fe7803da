"""Reading a library's own environment checks: ``if NAME not in os.environ.get(VAR, ""): raise …``.

The library says what it demands of the process environment in its code. This module finds those checks
(with ``ast``, on the installed source) so that a fault they raise — or will raise, when the job's environment
is read before a launch — is cured by giving the job what the check asks for, never by deleting the check:

- ``env_checks(src)``: every such check in a module, with the variable, the required text (a literal, or the
  literal arguments the module passes to the helper that holds the check) and the raise's message template;
- ``bind_message(template, message)``: which required text a raised message names;
- ``env_choices(src)``: variables the library reads with a fixed set of choices (``Literal[...]`` annotations,
  ``env_with_choices(...)``-style calls), for faults whose message asks for one of them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from agent.repair.edits import Source

ENV_READERS = ("getenv", "get")  # os.getenv(VAR), os.environ.get(VAR)


@dataclass(frozen=True)
class EnvCheck:
    var: str  # the environment variable the check reads, e.g. LD_PRELOAD
    required: str  # the text it must contain, e.g. libtcmalloc
    path: str
    line: int  # the raise
    template: str  # the raise's message with each {…} as a wildcard


def env_read(node: ast.AST) -> str | None:
    """VAR when ``node`` is ``os.environ.get("VAR", …)``, ``os.getenv("VAR")`` or ``os.environ["VAR"]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ENV_READERS:
        owner = ast.unparse(node.func.value)
        if owner in ("os", "os.environ", "environ") and node.args and isinstance(node.args[0], ast.Constant):
            value = node.args[0].value
            return value if isinstance(value, str) else None
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
        key = node.slice
        return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
    return None


def message_template(raise_node: ast.Raise) -> str:
    """The raised message's text with each formatted value as ``{}`` (f-strings and implicit concatenation)."""
    exc = raise_node.exc
    if not isinstance(exc, ast.Call) or not exc.args:
        return ""
    arg = exc.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in arg.values)
    return ""


def bind_message(template: str, message: str) -> list[str]:
    """The texts that filled the template's ``{}`` in ``message``; [] when the message is not this template's."""
    if not template:
        return []
    head = template.split("\n", 1)[0].strip()
    last = head.rfind("{}")
    if last >= 0 and (stop := head.find(". ", last)) >= 0:  # the first sentence names it; the rest may be cut
        head = head[:stop]
    pattern = "".join("(.+?)" if part == "{}" else re.escape(part) for part in re.split(r"(\{\})", head))
    match = re.search(pattern, " ".join(message.split()))
    return list(match.groups()) if match else []


def env_checks(src: Source) -> list[EnvCheck]:
    found: list[EnvCheck] = []
    for func in (n for n in ast.walk(src.tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        reads = {t.id: var for stmt in ast.walk(func) if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                 and isinstance(t := stmt.targets[0], ast.Name) and (var := env_read(stmt.value))}
        for test in (n for n in ast.walk(func) if isinstance(n, ast.If)):
            raised = next((n for n in test.body if isinstance(n, ast.Raise)), None)
            cmp = test.test
            if raised is None or not isinstance(cmp, ast.Compare) or not isinstance(cmp.ops[0], ast.NotIn):
                continue
            haystack = cmp.comparators[0]
            var = reads.get(haystack.id) if isinstance(haystack, ast.Name) else env_read(haystack)
            if var is None:
                continue
            for required in required_texts(src, func, cmp.left):
                found.append(EnvCheck(var, required, src.path, raised.lineno, message_template(raised)))
    return found


def required_texts(src: Source, func: ast.FunctionDef | ast.AsyncFunctionDef, needle: ast.expr) -> list[str]:
    """The literal a check looks for, or — when it is the helper's parameter — the literals it is called with."""
    if isinstance(needle, ast.Constant) and isinstance(needle.value, str):
        return [needle.value]
    if not isinstance(needle, ast.Name):
        return []
    params = [a.arg for a in func.args.args]
    if needle.id not in params:
        return []
    index = params.index(needle.id)
    texts = []
    for call in src.calls_named(func.name):
        arg = call.args[index] if index < len(call.args) else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            texts.append(arg.value)
    return texts


@dataclass(frozen=True)
class EnvChoice:
    var: str
    choices: tuple[str, ...]
    default: str | None
    path: str
    line: int


def env_choices(src: Source) -> list[EnvChoice]:
    """Variables declared with a fixed set of string choices: ``VAR: Literal["a", "b"] = "a"`` or a call whose
    arguments are the variable's name, a default and a list of choices."""
    found: dict[str, EnvChoice] = {}
    for node in ast.walk(src.tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            choices = literal_strings(node.annotation)
            if choices and node.target.id.isupper():
                found.setdefault(node.target.id, EnvChoice(node.target.id, choices, text_of(node.value),
                                                           src.path, node.lineno))
        elif isinstance(node, ast.Call) and len(node.args) >= 3:
            name, default, options = node.args[:3]
            var = text_of(name)
            if var and var.isupper() and isinstance(options, ast.List | ast.Tuple):
                choices = tuple(c for e in options.elts if (c := text_of(e)))
                if choices:
                    found[var] = EnvChoice(var, choices, text_of(default), src.path, node.lineno)
    return list(found.values())


def text_of(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def literal_strings(annotation: ast.expr) -> tuple[str, ...]:
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).endswith("Literal"):
        items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        return tuple(t for i in items if (t := text_of(i)))
    return ()
