"""A stop that is a limit of the installed library's own types: a config field whose type is a ``Literal`` that
lacks the value the job gives.

vLLM ≤ 0.16 validates ``--speculative_config '{"method": "extract_hidden_states", …}'`` with pydantic and its
``SpeculativeConfig.method`` is a ``Literal`` of the methods that release has; ``extract_hidden_states`` came
later, so the server dies with pydantic's ``literal_error``. No change to the job or to speculators gives that vLLM
the method. The message only says which class and field to read; the values are asked of the installed class's
own type hints in the target env, and the limit is claimed only when the value the job gives is not among them.
"""

from __future__ import annotations

import re
import typing

from agent.repair.context import library_definitions, module_of
from agent.repair.derived_platform import ask_python
from agent.repair.limits import in_library, installed_version, library_of
from agent.repair.types import Fault, RepairContext

LITERAL = re.compile(r"validation errors? for (?P<model>\w+)\s+(?P<field>\w+)\s+Input should be .+?"
                     r"\[type=literal_error, input_value=(?P<given>'[^']*'|\"[^\"]*\")", re.S)

ALLOWED = r'''
import importlib, json, typing
cls = getattr(importlib.import_module(%r), %r)
def values(t):
    if typing.get_origin(t) is typing.Literal:
        return [str(v) for v in typing.get_args(t)]
    return [v for a in typing.get_args(t) for v in values(a)]
print(json.dumps(values(typing.get_type_hints(cls)[%r])))
'''


def refused_value(ctx: RepairContext, fault: Fault) -> str | None:
    """The stop's sentence when the library's own type for the field lacks the value; None when not proven."""
    said = LITERAL.search(fault.message)
    if said is None:
        return None
    model, field, given = said["model"], said["field"], said["given"][1:-1]
    found = next((d for d in library_definitions(ctx, model) if d.kind == "class" and library_of(ctx, d.path)), None)
    module = module_of(ctx, found.path) if found else None
    if found is None or module is None:
        return None
    allowed = ask_python(ctx, ALLOWED % (module, model, field))
    if not isinstance(allowed, list) or not allowed or given in allowed:
        return None
    library = library_of(ctx, found.path) or ""
    version = installed_version(ctx, library)
    return (f"a limit of {library}{' ' + version if version else ''}: its {model}.{field} takes only "
            f"{', '.join(map(repr, typing.cast(list[str], allowed)))} (the installed class's own type, "
            f"{in_library(library, found.path)}), not {given!r}, which the job gives — no change to the job or to "
            f"the fixable packages gives this {library} that value; use a {library} release that has it")

