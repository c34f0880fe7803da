"""A run's IPC endpoints live in a short folder of its own, removed once nothing of the run is left
(tools/ipc_dir.py, tools/runs.py): a stopped engine leaves no socket in the temp dir. The variables that place
them are read from the library's own env module."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lab.build import LabPaths
from tools import ipc_dir, runs
from tools.host import LocalHost

VAR = "MEDIC_TEST_RPC_BASE"
# binds a socket where an engine would (``ipc://<base>/<uuid4>``) and, like a stopped engine, never unlinks it
BIND = ("import os, socket, sys, time, uuid; p = os.path.join(os.environ['" + VAR + "'], str(uuid.uuid4())); "
        "s = socket.socket(socket.AF_UNIX); s.bind(p); print(p, flush=True); time.sleep(float(sys.argv[1]))")
ENVS = '''
import os, tempfile
if TYPE_CHECKING:
    VLLM_RPC_BASE_PATH: str = tempfile.gettempdir()
    VLLM_CACHE_ROOT: str = os.path.expanduser("~/.cache/vllm")
environment_variables = {
    "VLLM_RPC_BASE_PATH": lambda: os.getenv("VLLM_RPC_BASE_PATH", tempfile.gettempdir()),
    "VLLM_CACHE_ROOT": lambda: os.path.expanduser(os.getenv("VLLM_CACHE_ROOT", "~/.cache/vllm")),
    "VLLM_OTHER_TMP": lambda: os.environ.get("VLLM_OTHER_TMP", tempfile.gettempdir() + "/x"),
}
'''


def test_the_variables_come_from_the_env_module_itself() -> None:
    assert ipc_dir.tempdir_variables(ENVS) == ["VLLM_RPC_BASE_PATH", "VLLM_OTHER_TMP"]
    assert ipc_dir.tempdir_variables("def broken(:") == []


@pytest.mark.lab
def test_the_installed_vllm_says_where_its_sockets_go(lab: LabPaths) -> None:
    found = ipc_dir.library_tempdir_variables(LocalHost(), str(lab.python), ["vllm", "no_such_package"])
    network = next(lab.venv.glob("lib/python*/site-packages/vllm/utils/network_utils.py")).read_text()
    assert found and any(f"envs.{var}" in network for var in found), found  # what names ipc://<base>/<uuid4>


def bound_socket(run: runs.Run) -> Path:
    deadline = time.monotonic() + 30
    while not Path(run.log).read_text().strip():
        assert time.monotonic() < deadline, "the run never bound its socket"
        time.sleep(0.05)
    return Path(Path(run.log).read_text().split()[0])


def wait_exited(host: LocalHost, run: runs.Run) -> None:
    deadline = time.monotonic() + 30
    while runs.status(host, run).state == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("ending", ["exits", "stopped"])
def test_a_runs_socket_lives_in_its_own_folder_gone_with_the_run(ending: str, tmp_path: Path) -> None:
    host = LocalHost()
    run = runs.launch(host, [sys.executable, "-c", BIND, "0" if ending == "exits" else "60"],
                      run_dir=str(tmp_path / "runs"), ipc_vars=[VAR])
    sock = bound_socket(run)
    assert sock.parent.parent == Path(tempfile.gettempdir()) and sock.parent.name.startswith(ipc_dir.PREFIX)
    assert len(str(sock)) < 100  # a unix socket path has ~107 bytes
    if ending == "stopped":
        runs.stop(host, run, grace=1)
    wait_exited(host, run)
    assert not sock.parent.exists(), f"{sock.parent} outlived its run"


def test_the_suites_check_counts_dropped_sockets_and_folders_not_held_ones(tmp_path: Path) -> None:
    from tests.fixtures_tmp import leftovers

    dropped, held = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    dropped.bind(str(tmp_path / "dropped"))
    dropped.close()  # its file stays, as a stopped engine's does
    held.bind(str(tmp_path / "held"))
    (tmp_path / f"{ipc_dir.PREFIX}abc123").mkdir()
    in_use = tmp_path / f"{ipc_dir.PREFIX}live42"  # another medic's run, alive beside the suite
    in_use.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={VAR: str(in_use)})
    # Popen returns once exec closed its error pipe, before the kernel has laid out the new program's environment:
    # until then /proc shows it empty (a race the full suite's load once lost)
    deadline = time.monotonic() + 10
    while str(in_use).encode() not in Path(f"/proc/{live.pid}/environ").read_bytes():
        assert time.monotonic() < deadline, "the live process never showed its environment"
        time.sleep(0.01)
    (tmp_path / "plain").write_text("not a socket")
    try:
        assert leftovers(tmp_path) == {str(tmp_path / "dropped"), str(tmp_path / f"{ipc_dir.PREFIX}abc123")}
    finally:
        held.close()
        live.kill()
        live.wait()
    assert str(in_use) in leftovers(tmp_path)  # its process gone, the folder is left over
