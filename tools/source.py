"""Source questions answered by the TARGET environment's own python, on whichever host it lives.

Each call sends the probe (``tools.source_probe.PROBE_TEXT``: tools/probe/ joined into one stdlib-only
script) to ``python -B -`` on the host and reads one JSON line back. The probe never imports the inspected
package, so a broken or slow vLLM still answers in well under a second. Paths in results are the target
host's absolute paths.

Targets are ``"pkg.mod:Class.method"`` or ``"pkg.mod.Class.method"`` (the longest importable prefix is the
module). ``path_extra`` puts folders first on the probe's ``sys.path`` (tests, or a job's PYTHONPATH).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tools.errors import SourceError
from tools.host import Host
from tools.probe import records
from tools.source_probe import MARK, PROBE_TEXT

PROBE_TIMEOUT = 60.0
MAX_VIEW_LINES = 400
MAX_VIEW_BYTES = 8_000_000


@dataclass(frozen=True)
class SourceView:
    path: str
    start: int
    end: int  # last line shown (clamped to the file and to MAX_VIEW_LINES)
    total_lines: int
    lines: tuple[tuple[int, str], ...]

    @property
    def text(self) -> str:
        """Numbered like ``cat -n``: what a person would paste into a bug report."""
        width = len(str(self.end))
        return "\n".join(f"{n:>{width}}  {line}" for n, line in self.lines)


@dataclass(frozen=True)
class GrepHit:
    path: str
    lineno: int
    text: str


@dataclass(frozen=True)
class SymbolLocation:
    path: str
    name: str  # qualname inside its module, "" for a module itself
    kind: str  # def | class | assign | module
    start: int  # first line, decorators included
    end: int
    source: str  # at most 400 lines of it
    module: str = ""
    truncated: bool = False


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # positional_only | positional_or_keyword | var_positional | keyword_only | var_keyword
    has_default: bool
    default_src: str | None
    annotation_src: str | None


@dataclass(frozen=True)
class Signature:
    """As a caller sees it: ``self``/``cls`` dropped; a class shows its (possibly generated) ``__init__``."""

    params: tuple[Param, ...]
    returns_src: str | None
    path: str
    lineno: int
    derived_from: str = "def"  # "def", "Base.__init__", "dataclass fields", "BaseModel fields", "object"
    # False when a layer (a decorator's wrapper, a metaclass, a base, a config) could not be read: what the
    # OUTERMOST callable accepts is then unknown, whatever ``params`` (the inner def's) say.
    exact: bool = False
    open_keywords: bool = False  # takes any keyword though no **kwargs shows (a pydantic model ignoring extras)
    layers: tuple[str, ...] = ()  # what the call goes through, innermost first: the evidence
    unknown: str | None = None  # why it is not exact
    required_exact: bool = False  # not exact, yet which parameters a call must fill is known (a package's dataclass)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def accepts_any_keyword(self) -> bool:
        return self.open_keywords or any(p.kind == "var_keyword" for p in self.params)

    def rejects_keyword(self, name: str) -> bool | None:
        """True only when the outermost callable provably rejects ``name=``; None when that is unknown."""
        record = {"exact": self.exact, "open_keywords": self.open_keywords,
                  "params": [{"name": p.name, "kind": p.kind} for p in self.params]}
        return records.rejects_keyword(record, name)

    def missing_required(self, given: set[str], positional: int) -> list[str] | None:
        """Parameters a call passing ``positional`` arguments and the keywords ``given`` leaves without a
        value; None when that cannot be proven (not exact, or a ``*args`` that takes any count)."""
        if not (self.exact or self.required_exact) or any(p.kind == "var_positional" for p in self.params):
            return None
        filled = {p.name for p in self.params if p.kind in ("positional_only", "positional_or_keyword")}
        filled = {n for i, n in enumerate(p.name for p in self.params if p.name in filled) if i < positional}
        return [p.name for p in self.params if not p.has_default and p.kind not in ("var_positional", "var_keyword")
                and p.name not in given | filled]


@dataclass(frozen=True)
class CallSite:
    path: str
    lineno: int
    func_text: str
    args_src: tuple[str, ...]
    keywords: tuple[tuple[str, str], ...]  # ("**", src) for a ``**mapping``
    source_line: str


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # method | property | attribute | classmethod | staticmethod
    signature: Signature | None
    lineno: int
    path: str = ""
    owner: str = ""  # "module:Class" that defines it (a base class for inherited members)


def _ask(host: Host, python: str, op: str, path_extra: Sequence[str] = (), **args: Any) -> Any:
    request = json.dumps({"op": op, "path_extra": list(path_extra), **args})
    script = f"{PROBE_TEXT}\nmain({request!r})\n"
    result = host.run([python, "-B", "-"], stdin=script, timeout=PROBE_TIMEOUT)
    reply = next((line[len(MARK) :] for line in result.stdout.split("\n") if line.startswith(MARK)), None)
    if reply is None:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise SourceError(
            f"{python} on {host.name} did not answer the source probe (exit {result.exit_code}): {detail}"
        )
    try:
        payload = json.loads(reply)
    except json.JSONDecodeError as exc:
        raise SourceError(f"the source probe on {host.name} answered garbled JSON: {exc}") from exc
    if not payload["ok"]:
        raise SourceError(payload["error"])
    return payload["result"]


def _signature(raw: dict[str, Any]) -> Signature:
    return Signature(
        params=tuple(Param(**p) for p in raw["params"]),
        returns_src=raw["returns_src"],
        path=raw["path"],
        lineno=raw["lineno"],
        derived_from=raw.get("derived_from", "def"),
        exact=bool(raw.get("exact", False)),
        open_keywords=bool(raw.get("open_keywords", False)),
        layers=tuple(raw.get("layers", ())),
        unknown=raw.get("unknown"),
        required_exact=bool(raw.get("required_exact", False)),
    )


def module_path(host: Host, python: str, module: str, *, path_extra: Sequence[str] = ()) -> str:
    """The file of ``module`` (``__init__.py`` for a package, its folder for a namespace package)."""
    return str(_ask(host, python, "module_path", path_extra, name=module))


def site_packages(host: Host, python: str, *, path_extra: Sequence[str] = ()) -> list[str]:
    return list(_ask(host, python, "site_packages", path_extra))


def view(host: Host, path: str, start: int, end: int) -> SourceView:
    """Lines ``start..end`` (1-based, inclusive) of a file on the host, at most MAX_VIEW_LINES of them."""
    if end < start:
        raise SourceError(f"view of {path}: end line {end} is before start line {start}")
    st = host.stat(path)
    if st is None or st.is_dir:
        raise SourceError(f"view: {path} is not a file on {host.name}")
    text = host.read_bytes(path, 0, MAX_VIEW_BYTES).decode("utf-8", errors="replace")
    all_lines = text.split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()  # the file's final newline does not start another line
    first = max(start, 1)
    last = min(end, len(all_lines), first + MAX_VIEW_LINES - 1)
    shown = tuple((n, all_lines[n - 1]) for n in range(first, last + 1))
    return SourceView(path, first, max(last, first - 1), len(all_lines), shown)


def grep(
    host: Host,
    root: str,
    pattern: str,
    *,
    glob: str = "*.py",
    max_hits: int = 200,
    python: str = "python3",
) -> list[GrepHit]:
    """Python-``re`` search, line by line, of files named like ``glob`` under ``root`` (a folder or file)."""
    hits = _ask(host, python, "grep", root=root, pattern=pattern, glob=glob, max_hits=max_hits)
    return [GrepHit(**h) for h in hits]


def find_symbol(host: Host, python: str, target: str, *, path_extra: Sequence[str] = ()) -> SymbolLocation:
    """Where ``target`` is defined, following re-exports, with its source."""
    return SymbolLocation(**_ask(host, python, "find_symbol", path_extra, target=target))


def locate_definitions(
    host: Host, python: str, package: str, name: str, *, path_extra: Sequence[str] = ()
) -> list[SymbolLocation]:
    """Every module in ``package`` that defines ``name`` at top level: where a moved import lives now."""
    found = _ask(host, python, "locate_definitions", path_extra, package=package, name=name)
    return [SymbolLocation(**f) for f in found]


def signature(host: Host, python: str, target: str, *, path_extra: Sequence[str] = ()) -> Signature:
    return _signature(_ask(host, python, "signature", path_extra, target=target))


def signatures(host: Host, python: str, targets: Sequence[str], *, path_extra: Sequence[str] = ()
               ) -> dict[str, Signature | SourceError]:
    """``signature`` of each target, from one probe process (each process costs a Python start on the host)."""
    replies = _ask(host, python, "many", path_extra, requests=[{"op": "signature", "target": t} for t in targets])
    return {target: _signature(reply["result"]) if reply["ok"] else SourceError(reply["error"])
            for target, reply in zip(targets, replies, strict=True)}


def call_sites(
    host: Host,
    python: str,
    package: str,
    name: str,
    *,
    max_sites: int | None = 50,
    path_extra: Sequence[str] = (),
) -> list[CallSite]:
    """Calls in ``package``'s own code of ``name(...)`` or ``<anything>.name(...)``: the first ``max_sites`` in
    path order, or every one (None)."""
    raw = _ask(host, python, "call_sites", path_extra, package=package, name=name, max_sites=max_sites)
    return [
        CallSite(
            path=s["path"],
            lineno=s["lineno"],
            func_text=s["func_text"],
            args_src=tuple(s["args_src"]),
            keywords=tuple((k, v) for k, v in s["keywords"]),
            source_line=s["source_line"],
        )
        for s in raw
    ]


def class_members(
    host: Host, python: str, target: str, *, all_bases: bool = False, path_extra: Sequence[str] = ()
) -> list[Member]:
    """Methods, properties and attributes (``self.x`` in ``__init__`` included), own ones first, then those
    inherited from base classes in the same top-level package (``all_bases``: from every package, e.g. torch's
    ``nn.Module``, when the question is whether an object has a member at all)."""
    raw = _ask(host, python, "class_members", path_extra, target=target, all_bases=all_bases)
    return [
        Member(
            name=m["name"],
            kind=m["kind"],
            signature=_signature(m["signature"]) if m["signature"] else None,
            lineno=m["lineno"],
            path=m["path"],
            owner=m["owner"],
        )
        for m in raw
    ]


def returns_of(host: Host, python: str, target: str, *, path_extra: Sequence[str] = ()) -> list[str]:
    """The source of each ``return`` value in a function (nested functions excluded); "None" for bare ones."""
    return list(_ask(host, python, "returns_of", path_extra, target=target))
