"""Where a library puts its IPC endpoints, read from its own env module, so each run can have a folder of its own.

vLLM names each ZMQ socket ``ipc://<base>/<uuid4>``; its env module (``vllm/envs.py``) says the base is a variable
whose default is ``tempfile.gettempdir()``. A stopped server or engine leaves that socket file behind, so every run
would add one to /tmp. The variables a library defaults to the temp dir are read from its env module (no name is
assumed); the run wrapper (tools/runs.py) points them at a short folder of the run's own (a socket path has ~107
bytes) and removes it once nothing of the run is left.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

from tools import pysyntax
from tools import source as src_tools
from tools.errors import MedicError
from tools.host import Host

PREFIX = "medic-ipc."  # what the wrapper names the folders it makes under the temp dir


def make_sh(variables: Sequence[str], record: str = '"$d/ipc"') -> str:
    """Shell that makes the run's IPC folder, writes its path to ``record`` (a file in the run's folder, so that
    whoever ends the run can remove it too) and exports ``variables`` pointing at it; "" when there are none."""
    exports = " ".join(f'{var}="$t"' for var in variables if var.isidentifier())
    if not exports:
        return ""
    return (f't=$(mktemp -d "${{TMPDIR:-/tmp}}/{PREFIX}XXXXXX") && printf \'%s\\n\' "$t" > {record} '
            f"&& export {exports}\n")


def drop_sh(record: str = '"$d/ipc"') -> str:
    """Shell that removes the IPC folder ``record`` names; only a folder of medic's name is ever removed."""
    return f't=$(cat {record} 2>/dev/null); case "$t" in */{PREFIX}*) find "$t" -depth -delete 2>/dev/null;; esac\n'


def tempdir_variables(source: str) -> list[str]:
    """The variables an env module reads whose default is the temp dir: ``"VAR": lambda: os.getenv("VAR",
    tempfile.gettempdir())`` (vLLM's table), or a module-level ``VAR = os.getenv("VAR", tempfile.gettempdir())``."""
    try:
        tree = pysyntax.parse(source)
    except SyntaxError:
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        pairs: Iterable[tuple[ast.expr | None, ast.expr]] = ()
        if isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values, strict=True)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            pairs = ((ast.Constant(node.targets[0].id), node.value),)
        for key, value in pairs:
            if (isinstance(key, ast.Constant) and isinstance(key.value, str) and reads_env(value, key.value)
                    and defaults_to_tempdir(value) and key.value not in found):
                found.append(key.value)
    return found


def reads_env(value: ast.expr, name: str) -> bool:
    """``value`` reads the variable ``name`` itself (``os.getenv("NAME", …)``, ``os.environ.get("NAME", …)``)."""
    return any(isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == name
               for n in ast.walk(value))


def defaults_to_tempdir(value: ast.expr) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "gettempdir"
               for n in ast.walk(value))


def library_tempdir_variables(host: Host, python: str, packages: Sequence[str]) -> list[str]:
    """The temp-dir variables of each package's ``<package>.envs`` module in the env of ``python``."""
    found: list[str] = []
    for package in packages:
        try:
            path = src_tools.module_path(host, python, f"{package}.envs")
            text = host.read_bytes(path).decode(errors="replace")
        except (MedicError, OSError):
            continue  # no env module: nothing to point elsewhere
        found += [var for var in tempdir_variables(text) if var not in found]
    return found

