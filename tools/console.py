"""The one place medic makes a rich Console: wrapped for a person at a terminal, never wrapped for a pipe.

rich assumes 80 columns when its stream is not a terminal and hard-wraps there, breaking paths mid-word in a
log or a file. Off a terminal, lines are soft-wrapped (left whole) and the width is effectively unlimited.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

NO_LIMIT = 1_000_000  # columns: wide enough that rich never wraps, pads nothing with soft_wrap on


def make_console(*, stderr: bool = False, **options: Any) -> Console:
    """A Console on stdout (or stderr); off a terminal, with soft wrapping and no width limit."""
    stream = sys.stderr if stderr else sys.stdout
    if not _is_tty(stream):
        options = {"soft_wrap": True, "width": NO_LIMIT, **options}
    return Console(stderr=stderr, **options)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream: not a terminal
        return False
