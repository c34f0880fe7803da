"""Where an in-process job sets a library setting: a keyword of its own call into the library.

A driver that builds its engine in-process (``LLM(model, block_size=128)``, ``CacheConfig(block_size=...)``) sets
the field in code, not on its command line; its own argparse would refuse an option it does not declare. So for
such a job the remedy of agent/repair/derived_option_branch.py is a patch of that keyword's value, in the job's
workdir or a fixable package: found by the keyword's name at a call whose callee the file imports from a library.
The value the call gives now is what the library's choice is asked about (a literal, or a module constant).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from agent.repair.context import read_source
from agent.repair.edits import Source, callee_name, replace_span
from agent.repair.types import RepairContext
from tools import source as src_tools
from tools.errors import MedicError


@dataclass(frozen=True)
class KeywordSite:
    src: Source
    keyword: ast.keyword
    value: object  # what the call gives now (None: not a constant medic can read)

    def with_value(self, value: object) -> str:
        """The file's text with the keyword given ``value`` (a literal, as the library's CLI would take it)."""
        return replace_span(self.src.text, self.src.start(self.keyword.value), self.src.end(self.keyword.value),
                            repr(value))


def keyword_sites(ctx: RepairContext, field: str) -> list[KeywordSite]:
    """Calls into a library passing ``field=`` in the job's workdir and the fixable packages."""
    roots = [ctx.workdir] if ctx.workdir else []
    roots += [f"{site.rstrip('/')}/{pkg}" for site in ctx.site_packages for pkg in ctx.fixable_packages]
    sites: list[KeywordSite] = []
    for root in roots:
        try:
            hits = src_tools.grep(ctx.host, root, rf"\b{field}\s*=", python=ctx.python)
        except MedicError:
            continue
        for path in dict.fromkeys(hit.path for hit in hits):
            src = read_source(ctx, path)
            if src is not None:
                sites += sites_in(src, field, ctx.library_packages)
    return sites


def sites_in(src: Source, field: str, libraries: tuple[str, ...]) -> list[KeywordSite]:
    found = []
    for call in (n for n in ast.walk(src.tree) if isinstance(n, ast.Call)):
        name = callee_name(call)
        root = call.func.value if isinstance(call.func, ast.Attribute) else None
        origin = (root.id if isinstance(root, ast.Name) else None) or (src.imported_from(name) if name else None)
        if not origin or origin.split(".")[0] not in libraries:  # ``vllm.LLM(...)`` or ``from vllm import LLM``
            continue
        for keyword in call.keywords:
            if keyword.arg == field:
                found.append(KeywordSite(src, keyword, constant(src.tree, keyword.value)))
    return found


def constant(tree: ast.Module, node: ast.expr) -> object:
    """A literal, or a module-level ``NAME = <literal>`` the value names."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        for stmt in tree.body:
            if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets)
                    and isinstance(stmt.value, ast.Constant)):
                return stmt.value.value
    return None
