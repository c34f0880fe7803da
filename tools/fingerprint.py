"""Naming a failure: what stays the same when the same fault happens again.

``frame_origin`` tells installed library code from the standard library and the user's own code;
``fingerprint`` keys a traceback by its exception type, the shape of its message and its innermost library
frame. Import both from ``tools.logs``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tools.log_types import Frame, Traceback
from tools.site_dirs import SITE_DIRS

DEFAULT_LIBRARY_MARKERS = SITE_DIRS


@dataclass(frozen=True, slots=True)
class FrameOrigin:
    kind: Literal["user", "library", "stdlib"]  # library: under a library marker such as site-packages
    package: str | None  # top-level package of a library frame: "vllm", "speculators", "torch"
    path: str  # a library frame's file relative to site-packages ("vllm/v1/engine/core.py"), else the file


_STDLIB = re.compile(r"[/\\]lib[/\\]python\d+(?:\.\d+)?[/\\]|<frozen ")


def frame_origin(frame: Frame, library_markers: Sequence[str] = DEFAULT_LIBRARY_MARKERS) -> FrameOrigin:
    """Whether ``frame`` runs installed library code, the standard library, or the user's own code."""
    for marker in library_markers:
        at = frame.file.rfind(marker)
        rest = frame.file[at + len(marker) :] if at >= 0 else ""
        if rest.startswith(("/", "\\")) or (rest and marker.endswith(("/", "\\"))):
            path = rest.lstrip("/\\").replace("\\", "/")
            package = re.split(r"[/.]", path, maxsplit=1)[0] or None
            return FrameOrigin("library", package, path)
    return FrameOrigin("stdlib" if _STDLIB.search(frame.file) else "user", None, frame.file)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    exc_type: str  # short name: "TypeError", "EngineDeadError"
    message: str  # numbers -> N, hex addresses -> ADDR, quoted paths -> PATH, pids removed, one line
    library_file: str | None  # innermost library frame, relative to site-packages
    library_func: str | None
    key: str  # short stable hash of the four fields above


_NORMALISERS = (
    (re.compile(r"\bpid[=:]\s*\d+,?\s*", re.IGNORECASE), ""),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "ADDR"),
    (re.compile(r"""(['"])(?:[A-Za-z]:\\|\.{0,2}/|~/)[^'"\n]*\1"""), "PATH"),
    (re.compile(r"(?<![A-Za-z_\d])\d+(?:\.\d+)?"), "N"),
)
_FINGERPRINT_MESSAGE_CHARS = 512


def normalise_message(message: str) -> str:
    for pattern, replacement in _NORMALISERS:
        message = pattern.sub(replacement, message)
    return " ".join(message.split())[:_FINGERPRINT_MESSAGE_CHARS]


def fingerprint(traceback: Traceback, library_markers: Sequence[str] = DEFAULT_LIBRARY_MARKERS) -> Fingerprint:
    """What stays the same when the same fault happens again: the exception type, the shape of the message
    and the innermost library frame."""
    library_file = library_func = None
    for frame in reversed(traceback.frames):
        origin = frame_origin(frame, library_markers)
        if origin.kind == "library":
            library_file, library_func = origin.path, frame.func
            break
    exc_type = traceback.short_type or "<truncated>"
    message = normalise_message(traceback.message)
    identity = "\x1f".join((exc_type, message, library_file or "", library_func or ""))
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return Fingerprint(exc_type, message, library_file, library_func, key)
