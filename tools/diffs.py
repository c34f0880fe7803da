"""Unified diffs and the ``Patch`` that carries them: a diff read into hunks, applied with zero fuzz and zero
offset, and written back out; each file of a ``Patch`` pinned by the sha256 of its text before and after.

Pure text work, no Host: tools/patches.py makes, applies and reverts patches on a host. Import all of it from
``tools.patches``.
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import shlex
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from tools.errors import PatchError, StaleContext

NO_NEWLINE = "\\ No newline at end of file\n"


class FilePatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str  # absolute, on the target host
    diff: str  # unified diff of this one file, ``a/<path>`` / ``b/<path>`` headers
    sha256_before: str
    sha256_after: str


class EnvEdit(BaseModel):
    """A change to the job's environment for medic's own launches: the host itself is not touched."""

    model_config = ConfigDict(frozen=True)

    var: str
    action: Literal["set", "unset", "prepend"]  # prepend: to a path list such as LD_PRELOAD (':'-separated)
    value: str = ""
    library: str = ""  # the value is this library's file, found on the host once a host step has installed it

    def describe(self) -> str:
        """The edit as a POSIX shell line: what the trace and the report's "Run your job with" show."""
        if self.action == "unset":
            return f"unset {self.var}"
        value = shlex.quote(self.value or f"<the {self.library} file>")
        if self.action == "prepend":  # keep what the variable already holds after the new entry
            return f"{self.var}={value}${{{self.var}:+:${self.var}}}"
        return f"{self.var}={value}"


class ArgEdit(BaseModel):
    """An option of the job's own command line, set for medic's launches (``--block-size 16``): what the job
    controls, as the library's CLI names it; the job's files and the library are not touched."""

    model_config = ConfigDict(frozen=True)

    option: str  # "--block-size"
    value: str | None  # None: a switch, given alone ("--no-enable-chunked-prefill")
    command: Literal["job", "server"] = "job"  # which command of a two-process job takes it

    def describe(self) -> str:
        return self.option if self.value is None else f"{self.option} {shlex.quote(self.value)}"


class Patch(BaseModel):
    """A remedy: file edits, job-environment edits and/or command-line options (and host steps only a person may
    take).

    Serializable with ``model_dump_json`` / ``Patch.model_validate_json``."""

    model_config = ConfigDict(frozen=True)

    id: str  # first 16 hex digits of the sha256 of the concatenated file diffs (and env edits)
    files: tuple[FilePatch, ...]
    rationale: str
    origin: str  # "playbook:<name>", "derived:<rule>", "llm"
    evidence: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    env: tuple[EnvEdit, ...] = ()  # applied to medic's next launches, undone by dropping the patch
    host_steps: tuple[str, ...] = ()  # commands a person runs on the host (or a policy lets medic run)
    args: tuple[ArgEdit, ...] = ()  # options of the job's commands for medic's next launches, undone likewise

    @property
    def diff(self) -> str:
        return "".join(f.diff for f in self.files) + "".join(f"# env: {e.describe()}\n" for e in self.env) + (
            "".join(f"# host: {step}\n" for step in self.host_steps)) + (
            "".join(f"# {a.command} option: {a.describe()}\n" for a in self.args))


def env_patch(env: tuple[EnvEdit, ...], *, rationale: str, origin: str, evidence: tuple[str, ...] = (),
              checks: tuple[str, ...] = (), host_steps: tuple[str, ...] = ()) -> Patch:
    """A remedy that changes no file: the job's environment, and what a person must do on the host first."""
    if not env and not host_steps:
        raise PatchError("an environment remedy needs an env edit or a host step")
    key = "".join(e.describe() + "\n" for e in env) + "".join(s + "\n" for s in host_steps)
    return Patch(id="env-" + sha256(key.encode())[:12], files=(), rationale=rationale, origin=origin,
                 evidence=evidence, checks=checks, env=env, host_steps=host_steps)


def arg_patch(args: tuple[ArgEdit, ...], *, rationale: str, origin: str, evidence: tuple[str, ...] = ()) -> Patch:
    """A remedy that changes no file and no variable: options of the job's command line."""
    if not args:
        raise PatchError("a command-option remedy needs an option")
    key = "".join(f"{a.command} {a.describe()}\n" for a in args)
    return Patch(id="arg-" + sha256(key.encode())[:12], files=(), rationale=rationale, origin=origin,
                 evidence=evidence, args=args)


@dataclass(frozen=True)
class Hunk:
    source_start: int
    source_length: int
    source_lines: tuple[str, ...]  # context and removed lines, newlines kept
    target_lines: tuple[str, ...]  # context and added lines


@dataclass(frozen=True)
class FileDiff:
    path: str
    hunks: tuple[Hunk, ...]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def diff_lines(text: str) -> list[str]:
    """Split at "\\n" only, as unified diffs do (str.splitlines also splits at \\f, \\x1c, \\r...)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def decode_source(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError(f"{path} is not UTF-8 text; medic only patches source files") from exc


def unified_diff(path: str, before: str, after: str) -> str:
    out = difflib.unified_diff(diff_lines(before), diff_lines(after), fromfile="a" + path, tofile="b" + path)
    return "".join(line if line.endswith("\n") else line + "\n" + NO_NEWLINE for line in out)


def _header_path(name: str, base_dir: str | None) -> str:
    if name.startswith(("a/", "b/")):
        name = name[2:]
        if base_dir and not ("/" + name).startswith(base_dir.rstrip("/") + "/"):
            return posixpath.join(base_dir, name)
        return "/" + name  # our own headers: "a" + an absolute path
    return name if posixpath.isabs(name) or not base_dir else posixpath.join(base_dir, name)


def parse_diff(text: str, *, base_dir: str | None = None) -> dict[str, FileDiff]:
    """Per-file hunks of a unified diff; relative header paths are taken under ``base_dir`` if given."""
    try:
        patch_set = PatchSet(text)
    except UnidiffParseError as exc:
        raise PatchError(f"not a unified diff: {exc}") from exc
    if not patch_set:
        raise PatchError("the diff names no file")
    diffs: dict[str, FileDiff] = {}
    for patched in patch_set:
        path = _header_path(patched.target_file, base_dir)
        if "/dev/null" in (patched.source_file, patched.target_file) or patched.is_rename:
            raise PatchError(f"{path}: only edits of existing files are supported (no add/remove/rename)")
        hunks = []
        for hunk in patched:
            source: list[str] = []
            target: list[str] = []
            sides: tuple[list[str], ...] = ()
            for line in hunk:
                if line.line_type == "\\":  # the line before has no final newline
                    for side in sides:
                        side[-1] = side[-1].removesuffix("\n")
                    continue
                sides = {" ": (source, target), "-": (source,), "+": (target,)}.get(line.line_type, ())
                for side in sides:
                    side.append(line.value)
            hunks.append(Hunk(hunk.source_start, hunk.source_length, tuple(source), tuple(target)))
        diffs[path] = FileDiff(path, tuple(hunks))
    return diffs


def apply_hunks(text: str, diff: FileDiff) -> str:
    """Apply with zero fuzz and zero offset: every context line must be where the hunk header says."""
    lines, out, pos = diff_lines(text), [], 0
    for hunk in diff.hunks:
        start = hunk.source_start - 1 if hunk.source_length else hunk.source_start
        end = start + len(hunk.source_lines)
        if start < pos or lines[start:end] != list(hunk.source_lines):
            raise StaleContext(
                f"{diff.path}: hunk @@ -{hunk.source_start},{hunk.source_length} @@ does not match the file "
                "at that line (no fuzz, no offset): re-read the source and make the patch again"
            )
        out += lines[pos:start] + list(hunk.target_lines)
        pos = end
    return "".join(out + lines[pos:])
