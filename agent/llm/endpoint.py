"""Whether the model endpoint is alive, when a reply says nothing usable: a dead engine is a dead endpoint.

vLLM's OpenAI server, once its engine has died, answers a chat request with its error object where a completion
should be (HTTP 200, no ``choices``: vLLM 0.16 returns the ErrorResponse from the route) and ``/health`` with 503.
Before calling such a reply a protocol break, medic asks the server's ``/health`` — the server's own word on its
engine. When the server is one medic started (``llm.server_log``: bench/llm.py, the tests' real server), the
message quotes the server's fatal line, the root cause in its log.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tools.logs import clean_lines, extract_tracebacks, message_line, root_cause

HEALTH_TIMEOUT = 5.0  # seconds: /health answers at once, or the server is not there
NO_HEALTH_ROUTE = (404, 405, 501)
MAX_LOG_BYTES = 4 * 1024 * 1024  # the fatal line is near the end: read at most this much of it


def health_url(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p/health`` (vLLM serves it beside the API, not under /v1)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/health", "", ""))


def health(base_url: str) -> str | None:
    """None when the server says it is healthy (or has no /health to ask); else what it answered."""
    try:
        with urllib.request.urlopen(health_url(base_url), timeout=HEALTH_TIMEOUT) as reply:
            return None if reply.status < 400 else f"HTTP {reply.status}"
    except urllib.error.HTTPError as exc:
        # no such route or method: a server with no /health to ask, not a dead one
        return None if exc.code in NO_HEALTH_ROUTE else f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return f"no answer ({type(exc).__name__})"


def server_fatal(log: str | None) -> str | None:
    """The root cause the server's own log gives (``RuntimeError: …``), or None."""
    if not log:
        return None
    try:
        with open(Path(log), "rb") as fh:
            fh.seek(max(0, Path(log).stat().st_size - MAX_LOG_BYTES))
            data = fh.read()
    except OSError:
        return None
    cause = root_cause(extract_tracebacks(clean_lines(data)))
    if cause is None or not cause.exc_type:
        return None
    return message_line(f"{cause.exc_type}: {cause.message}".strip())


def dead_endpoint(endpoint: str, base_url: str, server_log: str | None, said: str) -> str | None:
    """The message for an endpoint whose server says its engine is gone, or None when /health is fine."""
    answered = health(base_url)
    fatal = server_fatal(server_log) if answered else None
    if answered is None or (answered.startswith("no answer") and not fatal):
        return None  # healthy, or nothing there to say dead from never started
    why = f"; its server's log says: {fatal}" if fatal else (f"; its last reply said: {said}" if said else "")
    return f"the model endpoint {endpoint} is dead: /health answered {answered}{why}"
