"""Raw job-log bytes into lines of text, before anything reads what the lines say (tools/logs.py does that).

Logs are untrusted input: terminal escape sequences (colours, cursor moves, window titles) and C0 control bytes are
dropped byte-wise before decoding, so none can hide text or reach a terminal; undecodable bytes become U+FFFD;
and a line that never ends (a tqdm bar redrawn for hours) is kept bounded while it waits for its ``\\n``.
"""

from __future__ import annotations

import re

# C0 control characters other than \t \n \r and ESC: dropped byte-wise, before decoding (never inside UTF-8).
_CONTROL_BYTES = bytes(c for c in range(32) if c not in (9, 10, 13, 27)) + b"\x7f"
_TERMINAL_ESCAPES = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase-line
    rb"|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    rb"|\x1b[PX^_][^\x1b\n]*(?:\x1b\\)?"  # DCS / SOS / PM / APC strings
    rb"|\x1b[ -/]*[0-~]?"  # any other escape, or a lone ESC
)
MAX_PENDING_BYTES = 1 << 20


def decoded_lines(block: bytes) -> list[str]:
    """The lines of ``block`` as text, escapes and control bytes gone (a last line with no ``\\n`` is kept)."""
    if b"\x1b" in block:  # before the control bytes go: BEL ends an OSC sequence
        block = _TERMINAL_ESCAPES.sub(b"", block)
    lines = block.translate(None, _CONTROL_BYTES).decode("utf-8", errors="replace").split("\n")
    if block.endswith(b"\n"):
        lines.pop()
    return lines


def bounded_pending(pending: bytes) -> bytes:
    """Keep an unfinished line bounded: of its redraws only the prefix and the latest one matter."""
    if len(pending) <= MAX_PENDING_BYTES:
        return pending
    first, last = pending.find(b"\r"), pending.rfind(b"\r")
    if 0 <= first < last:
        pending = pending[:first] + pending[last:]
    if len(pending) > MAX_PENDING_BYTES:
        half = MAX_PENDING_BYTES // 2
        pending = pending[:half] + pending[-half:]
    return pending
