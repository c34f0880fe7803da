"""The server half of a two-process job: a long-lived server (the model load lives there) and a client run
against it. Both are ordinary detached runs (tools/runs.py); this module adds what a server needs on top:
a port, the command with ``{port}`` filled in, and readiness = its health endpoint answers.

Readiness is asked on the host itself (loopback), with the target's python and no third-party module, so it
works the same over SSH. A server that exits before it is ready is a crashed launch like any other.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from tools import runs
from tools.host import Host

PORT_FIELD = "{port}"
HEALTH_PATH = "/health"
ReadyState = Literal["ready", "exited", "timeout"]

# one line of python run on the host: a free loopback port (bind 0), or the HTTP status of the health URL
_FREE_PORT = "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1]); s.close()"
_HEALTH = ("import sys, urllib.request\n"
           "try:\n"
           "    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)\n"
           "except Exception as exc:\n"
           "    print('down', type(exc).__name__)\n")


def with_port(command: Sequence[str], port: int) -> list[str]:
    """The command with every ``{port}`` (in any word) replaced by the port."""
    return [word.replace(PORT_FIELD, str(port)) for word in command]


def names_port(command: Sequence[str]) -> bool:
    return any(PORT_FIELD in word for word in command)


def free_port(host: Host, python: str) -> int:
    """A port nothing listens on now, on the host's loopback (the server binds 127.0.0.1)."""
    answer = host.run([python, "-c", _FREE_PORT], timeout=30)
    word = answer.stdout.strip()
    if not answer.ok or not word.isdigit():
        raise OSError(f"cannot find a free port on {host.name}: {answer.stderr.strip() or word}")
    return int(word)


def healthy(host: Host, python: str, port: int) -> bool:
    answer = host.run([python, "-c", _HEALTH, f"http://127.0.0.1:{port}{HEALTH_PATH}"], timeout=30)
    return answer.ok and answer.stdout.strip() == "200"


@dataclass(frozen=True)
class Readiness:
    state: ReadyState
    seconds: float
    exit_code: int | None = None
    port: int | None = None  # where it answered: the port it announced in its log when not the one asked


# The line a server writes once it listens (uvicorn's "Uvicorn running on http://0.0.0.0:8000", vLLM's
# "Starting vLLM API server 0 on http://127.0.0.1:8000", http.server's "Serving HTTP on ... (http://h:p/)"),
# on an address this host's loopback reaches
ANNOUNCED = re.compile(r"(?i)\b(?:running|serving|listening|start(?:ing|ed))\b[^\n]*?"
                       r"https?://(?:127\.\d+\.\d+\.\d+|localhost|0\.0\.0\.0|\[::1?\]):(\d+)")


def announced_port(text: str) -> int | None:
    """The last port the server says it listens on, in its own log."""
    found = ANNOUNCED.findall(text)
    return int(found[-1]) if found else None


def wait_ready(host: Host, python: str, run: runs.Run, port: int, *, timeout: float,
               on_log: Callable[[bytes], None] = lambda _: None, poll: float = 1.0,
               clock: Callable[[], float] = time.monotonic) -> Readiness:
    """Follow the server's log (``on_log`` gets each new chunk) until its health endpoint answers 200, it
    exits, or ``timeout`` seconds pass. The exit file is looked at every poll; the health URL too. A server
    that announces another port in its log than ``port`` is asked there: polling ``port`` would wait out the
    timeout while it sits loaded."""
    started, offset, tail = clock(), 0, ""
    while True:
        chunk = runs.follow(host, run, offset)
        offset = chunk.offset
        if chunk.data:
            on_log(chunk.data)
            text = tail + chunk.data.decode("utf-8", errors="replace")
            port = announced_port(text) or port
            tail = text[-200:]  # an announcement cut between two chunks
        if host.exists(run.exit):
            status = runs.status(host, run)
            return Readiness("exited", clock() - started, status.exit_code)
        if healthy(host, python, port):
            return Readiness("ready", clock() - started, port=port)
        if clock() - started > timeout:
            return Readiness("timeout", clock() - started)
        time.sleep(poll)


def alive(host: Host, run: runs.Run) -> bool:
    """Whether the server run is still running (no exit file, its wrapper alive)."""
    return not host.exists(run.exit) and runs.status(host, run).state == "running"


def describe(command: Sequence[str]) -> str:
    return shlex.join(command)
