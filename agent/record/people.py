"""Text for people: short paths, short signatures, rounded numbers, no word said twice.

The trace keeps every path and number whole (replay and the postmortem need them); what a person reads — the
live view, the panel, the report, the postmortem — goes through here. A path in the target env's
site-packages reads as the package path (``speculators/data_generation/custom_worker.py:30``), one in the
job's folder as ``<workdir>/extract.py``, the target's python as ``python`` (as the person typed it).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tools.site_dirs import below_site

# an absolute path inside free text: starts after a space, quote, bracket or `=`, runs to one of those
_PATH = re.compile(r"(?<![\w.~/-])/[^\s'\"`,;()\[\]{}<>|]+")
# `Name(a, b, c, …)`: a signature or call written out with bare parameter names (no values, no nesting)
_SIGNATURE = re.compile(r"(?P<name>[A-Za-z_][\w.:]*)\((?P<params>\s*[\w*]+(?:\s*,\s*[\w*]+){3,}\s*)\)")
MAX_PARAMS = 3  # a signature longer than this shows the parameters the line is about, and … for the rest


# five or more decimals (0.0020738840103149414) is a measurement; versions, paths and ids never look like that
_LONG_NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d{5,}(?:[eE][-+]?\d+)?(?!\d|\.\d)")


def human_seconds(seconds: float | None) -> str:
    """12.3s under a minute, then 3m 54s, then 1h 02m."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def human_number(value: float) -> str:
    """Two significant digits under 1 (0.0020738840103149414 -> 0.0021), one decimal from 1 on."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.{1 - math.floor(math.log10(abs(value)))}f}"


def human_numbers(text: str) -> str:
    """``text`` with each long decimal in it rounded by ``human_number``."""
    return _LONG_NUMBER.sub(lambda match: human_number(float(match.group())), text)



@dataclass(frozen=True)
class Shortener:
    """Rewrites the absolute paths in a line to the names a person recognises; one per session."""

    workdir: str = ""
    python: str = ""
    home: str = ""

    @classmethod
    def for_config(cls, config: Mapping[str, Any] | None) -> Shortener:
        """From a session config as a dict (a trace header's ``config``, or SessionConfig.model_dump())."""
        target = (config or {}).get("target") or {}
        local = target.get("host", "local") in ("local", "localhost-direct")
        return cls(workdir=str(target.get("workdir") or "").rstrip("/"), python=str(target.get("python") or ""),
                   home=os.path.expanduser("~").rstrip("/") if local else "")

    def path(self, path: str) -> str:
        if self.python and path == self.python:
            return "python"
        if below := below_site(path):
            return below
        if self.workdir and (path == self.workdir or path.startswith(self.workdir + "/")):
            return "<workdir>" + path[len(self.workdir):]
        if self.home and len(self.home) > 1 and path.startswith(self.home + "/"):
            return "~" + path[len(self.home):]
        return path

    def text(self, text: str) -> str:
        return _PATH.sub(lambda match: self.path(match.group()), text)


def short_signatures(text: str, about: Iterable[str] = ()) -> str:
    """``SchedulerConfig(max_model_len, is_encoder_decoder, runner_type, …16 names)`` → ``SchedulerConfig(…,
    is_encoder_decoder, …)``: the names the line is about (``about``) stay, the rest is an ellipsis."""
    wanted = set(about)

    def shorten(match: re.Match[str]) -> str:
        params = [p.strip() for p in match["params"].split(",")]
        if len(params) <= MAX_PARAMS:
            return match.group()
        kept = [p if p in wanted else "…" for p in params]
        squeezed = [p for i, p in enumerate(kept) if p != "…" or i == 0 or kept[i - 1] != "…"]
        return f"{match['name']}({', '.join(squeezed)})"

    return _SIGNATURE.sub(shorten, text)


def without_repeat(head: str, text: str) -> str:
    """``head: text``, unless ``text`` already starts with ``head``'s word ("verified: verified by …")."""
    first = text.split(maxsplit=1)[0].rstrip(":,.").lower() if text.split() else ""
    return text if first == head.lower() else f"{head}: {text}" if text else head


def without_subject(subject: str, detail: str) -> str:
    """A check's detail without the name it starts with when the check line already said it
    ("import x: ok x imports in the target env" → "import x: ok, imports in the target env")."""
    for word in subject.split()[1:]:
        if detail.startswith(word + " "):
            return detail[len(word) + 1:]
        if detail.startswith(word + "("):  # a signature: its name without the module is enough
            return word.rsplit(":", 1)[-1].rsplit(".", 1)[-1] + detail[len(word):]
    return detail


def for_people(text: str, shortener: Shortener | None = None, about: Iterable[str] = ()) -> str:
    """One line as a person reads it: short paths, short signatures, rounded numbers."""
    text = (shortener or Shortener()).text(text)
    return human_numbers(short_signatures(text, about))
