"""Playbooks: known failure signatures and their remedies, as YAML data under playbooks/.

playbooks/ ships as the package ``medic_playbooks`` (pyproject.toml maps it), so an installed wheel reads the same
files through importlib.resources as a checkout does. Finding none is an error: medic without its playbooks
would quietly miss every fault they know.

A playbook matches a Fault by exception type, a message regex, frame patterns (``path/suffix`` or
``path/suffix:func``, any frame of the root cause) and version ranges of the installed packages. Its remedy is
a small, named edit kind with parameters, applied to the caller's code found among the fixable frames (and,
for a fault without a traceback such as a wrong output, in the code the driver reaches: ``Fault.reach``):
``rewrite_line``, ``add_keyword``, ``guard_call`` (agent/repair/guard_call.py: a platform-only call guarded
where it is made, followed into a fixable helper when the failing line only calls it).
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.repair.context import candidate, evidence_line, fixable_frames, read_source
from agent.repair.edits import Source, add_keyword, replace_span
from agent.repair.guard_call import guard_call
from agent.repair.types import Candidate, Check, Fault, OutputFact, RepairContext
from tools.errors import MedicError, UsageError

PLAYBOOK_PACKAGE = "medic_playbooks"


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exc_type: str
    message: str = ".*"
    frames: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    # a wrong output: facts medic's own check measured (agent/repair/types.py OutputFacts), all of which must hold;
    # never the wording of a validator
    output: list[OutputFact] = Field(default_factory=list)

    @field_validator("exc_type", "message")
    @classmethod
    def _regex(cls, value: str) -> str:
        re.compile(value)
        return value

    @field_validator("versions")
    @classmethod
    def _ranges(cls, value: dict[str, str]) -> dict[str, str]:
        for spec in value.values():
            SpecifierSet(spec)
        return value

    def matches(self, fault: Fault, versions: dict[str, str]) -> bool:
        if not re.fullmatch(self.exc_type, fault.exc_type.rsplit(".", 1)[-1]):  # a name, or names: A|B
            return False
        if not re.search(self.message, fault.message, re.S):
            return False
        if self.output and not (fault.output and all(fault.output.holds(fact) for fact in self.output)):
            return False
        for package, spec in self.versions.items():
            installed = versions.get(package)
            try:
                if installed is not None and Version(installed.split("+")[0]) not in SpecifierSet(spec):
                    return False
            except (InvalidVersion, InvalidSpecifier):
                return False
        return all(any(frame_matches(pattern, f.file, f.func) for f in fault.frames) for pattern in self.frames)


def frame_matches(pattern: str, file: str, func: str) -> bool:
    path, _, want_func = pattern.partition(":")
    return path in file and (not want_func or want_func == func)


class Remedy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["rewrite_line", "add_keyword", "guard_call"]
    params: dict[str, str]


class PlaybookCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["compile", "import", "signature_has", "member_exists", "grep"]
    target: str
    detail: str = ""


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    summary: str
    signature: Signature
    also: list[Signature] = Field(default_factory=list)
    remedy: Remedy
    rationale: str
    checks: list[PlaybookCheck] = Field(default_factory=list)
    # how the scan may find this fault before any launch (agent/repair/scan_playbooks.py); None: only a run shows it
    predict: Literal["keyword_left_at_default"] | None = None

    @model_validator(mode="after")
    def _predictable(self) -> Playbook:
        if self.predict == "keyword_left_at_default" and self.remedy.kind != "add_keyword":
            raise ValueError("predict: keyword_left_at_default needs an add_keyword remedy")
        return self

    def matches(self, fault: Fault, versions: dict[str, str]) -> bool:
        return any(sig.matches(fault, versions) for sig in [self.signature, *self.also])


def playbook_folder() -> Traversable:
    try:
        return resources.files(PLAYBOOK_PACKAGE)
    except ModuleNotFoundError as exc:
        raise MedicError(f"medic's playbooks ({PLAYBOOK_PACKAGE}) are not installed: reinstall medic") from exc


def load_playbooks(folder: Traversable | None = None) -> list[Playbook]:
    """Every playbook in ``folder`` (default: the installed ones), validated; a bad file is a UsageError naming
    it, and a folder with none is an error too."""
    folder = playbook_folder() if folder is None else folder
    books: list[Playbook] = []
    for path in sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name):
        try:
            books.append(Playbook.model_validate(yaml.safe_load(path.read_text(encoding="utf-8"))))
        except (yaml.YAMLError, ValidationError, re.error) as exc:
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"playbook {path.name} is invalid: {first}") from exc
    ids = [b.id for b in books]
    if len(ids) != len(set(ids)):
        raise UsageError(f"two playbooks share an id in {folder}")
    if not books:
        raise MedicError(f"no playbooks (*.yaml) in {folder}: medic is installed without its data")
    return books


def playbook_candidates(ctx: RepairContext, fault: Fault, books: list[Playbook]) -> list[Candidate]:
    found: list[Candidate] = []
    predicted = fault.finding.name if fault.finding and fault.finding.kind == "playbook" else None
    for book in books:
        # the scan's prediction names its playbook (no run has raised the signature yet)
        if book.id == predicted or (predicted is None and book.matches(fault, ctx.versions)):
            made = apply_remedy(ctx, fault, book)
            if made is not None:
                found.append(made)
    return found


def apply_remedy(ctx: RepairContext, fault: Fault, book: Playbook) -> Candidate | None:
    params = book.remedy.params
    checks = [Check(c.kind, c.target, c.detail) for c in book.checks]
    why = " ".join(book.rationale.split())
    frames = fixable_frames(ctx, fault)
    if book.remedy.kind == "guard_call":  # in the frames' statements, or the fixable helper they call
        return guard_call(ctx, fault, params, origin=f"playbook:{book.id}", rationale=why, checks=checks)
    if book.remedy.kind == "rewrite_line":
        pattern = re.compile(params["pattern"])
        for frame in frames:
            src = read_source(ctx, frame.file)
            line = src.line(frame.line) if src else ""
            match = pattern.match(line)
            if src is None or not match:
                continue
            start = src.pos(frame.line, 0)
            new = params["replacement"].format(**match.groupdict())
            text = replace_span(src.text, start, start + len(line), new)
            return candidate(ctx, {frame.file: text}, origin=f"playbook:{book.id}", rationale=why,
                             evidence=[evidence_line(frame.file, frame.line, line)], extra_checks=checks)
        return None
    # add_keyword: in a fixable file on the failing path, else in the code the driver reaches (a wrong output
    # has no traceback: the validator's fault names those files)
    callee, keyword, value = params["callee"], params["keyword"], params["value"]
    for path in dict.fromkeys([*(f.file for f in frames), *fault.reach]):
        src = read_source(ctx, path)
        if src is None:
            continue
        calls = [c for c in src.calls_named(callee) if all(k.arg != keyword for k in c.keywords)]
        if not calls:
            continue
        text = src.text
        for call in sorted(calls, key=lambda c: c.lineno, reverse=True):
            current = Source(path, text)
            text = add_keyword(current, current.call_at(call.lineno, callee) or call, keyword, value)
        evidence = [evidence_line(path, c.lineno, src.line(c.lineno)) for c in calls]
        return candidate(ctx, {path: text}, origin=f"playbook:{book.id}", rationale=why, evidence=evidence,
                         extra_checks=checks)
    return None
