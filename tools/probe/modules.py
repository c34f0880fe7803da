"""Finding and reading the modules the probe inspects, without importing them: spec lookup by hand, files
read at most MAX_FILE_BYTES, parsed once, and expressions cut to MAX_SNIPPET characters.

Part of the source probe (see tools/source_probe.py): stdlib only, Python 3.8+.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import sys
from importlib.machinery import PathFinder
from typing import Any

MAX_SNIPPET = 300  # characters of one expression or line
MAX_FILE_BYTES = 4_000_000
_parsed: dict[str, tuple[str, ast.Module]] = {}
_lines: dict[int, tuple[str, list[str]]] = {}


class ProbeError(Exception):
    pass


class Found:
    """A symbol: the module it lives in, its file, the ast node (None for the module itself), its qualname."""

    def __init__(self, module: str, path: str, node: Any, qual: list[str]) -> None:
        self.module, self.path, self.node, self.qual = module, path, node, qual

    @property
    def text(self) -> str:
        return parse(self.path)[0]

    def key(self) -> tuple[str, int]:
        return self.path, getattr(self.node, "lineno", 0)


def read_source(path: str) -> str:
    """At most MAX_FILE_BYTES of ``path``, undecodable bytes replaced; OSError if it cannot be read."""
    with open(path, "rb") as fh:
        return fh.read(MAX_FILE_BYTES).decode("utf-8", "replace")


def parse(path: str) -> tuple[str, ast.Module]:
    if path not in _parsed:
        text = read_source(path)
        try:
            _parsed[path] = (text, ast.parse(text, path))
        except SyntaxError as exc:
            raise ProbeError(f"{path}:{exc.lineno} does not parse: {exc.msg}") from exc
    return _parsed[path]


def snippet(text: str, node: Any) -> str:
    """The source of ``node``, cut to MAX_SNIPPET (``ast.get_source_segment`` re-splits the file per call)."""
    if id(text) not in _lines or _lines[id(text)][0] is not text:
        _lines[id(text)] = (text, text.split("\n"))
    lines, first, last = _lines[id(text)][1], node.lineno - 1, min(node.end_lineno - 1, node.lineno + 20)
    chunk = [line.encode() for line in lines[first : last + 1]]
    if last == node.end_lineno - 1:
        chunk[-1] = chunk[-1][: node.end_col_offset]
    chunk[0] = chunk[0][node.col_offset :]
    src = b"\n".join(chunk).decode("utf-8", "replace")
    return src if len(src) <= MAX_SNIPPET else src[: MAX_SNIPPET - 3] + "..."


def find_spec(name: str) -> Any:
    """The spec of ``name`` found without importing any parent package's ``__init__``."""
    parts = name.split(".")
    spec = PathFinder.find_spec(parts[0])
    if spec is None:  # editable installs register their own finders
        for finder in sys.meta_path:
            try:
                spec = finder.find_spec(parts[0], None)
            except Exception:
                spec = None
            if spec is not None:
                break
    for i in range(1, len(parts)):
        locations = spec.submodule_search_locations if spec is not None else None
        if not locations:
            return None
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), list(locations))
    return spec


def module_file(name: str) -> str:
    spec = find_spec(name)
    if spec is None:
        raise ProbeError(f"no module {name!r} on the sys.path of {sys.executable}")
    if spec.has_location and spec.origin:
        return spec.origin
    if spec.submodule_search_locations:
        return next(iter(spec.submodule_search_locations))  # namespace package: its first folder
    raise ProbeError(f"{name} is built into {sys.executable}: there is no file to read")


def source_file(name: str) -> str:
    path = module_file(name)
    if os.path.isdir(path):
        raise ProbeError(f"{name} is a namespace package ({path}) with no source of its own")
    if not path.endswith(".py"):
        raise ProbeError(f"{name} is compiled ({path}): there is no Python source to read")
    return path


def package_of(module: str, path: str) -> str:
    return module if path.endswith("__init__.py") else module.rpartition(".")[0]



def files_under(root: str, glob: str) -> Any:
    """(search root, file) for each matching file, in sorted order; caches and hidden folders skipped."""
    if os.path.isfile(root):
        yield root, root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if fnmatch.fnmatch(name, glob):
                yield root, os.path.join(folder, name)


def package_files(package: str) -> Any:
    spec = find_spec(package)
    if spec is None:
        raise ProbeError(f"no package {package!r} on the sys.path of {sys.executable}")
    for root in spec.submodule_search_locations or [spec.origin]:
        yield from files_under(root, "*.py")


def read(path: str) -> str:
    """``read_source``, or "" for a file that cannot be read (a scan goes on past it)."""
    try:
        return read_source(path)
    except OSError:
        return ""

