"""Kills in the middle of writing a patched file: a subprocess rewrites a large .py file in a loop through
LocalHost.write_bytes_atomic / SSHHost.write_bytes_atomic and is SIGKILLed at random moments. Afterwards the file
is always exactly the old or the new content, never a mix or a prefix.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures_fake import REPO, record_figure
from tests.fixtures_ssh import SSHServer

SIZE = 4 * 1024 * 1024
WRITER = """
import sys
mode, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "ssh":
    from tools.ssh import SSHHost
    host = SSHHost(sys.argv[4], config_path=sys.argv[5], known_hosts_path=sys.argv[6], key_filename=sys.argv[7],
                   connect_timeout=5.0, retry_for=5.0)
else:
    from tools.host import LocalHost
    host = LocalHost()
contents = [(b"# A\\n" + b"a = 1\\n" * size)[:size], (b"# B\\n" + b"b = 2\\n" * size)[:size]]
print("ready", flush=True)
i = 0
while True:
    print(f"start {i % 2}", flush=True)
    host.write_bytes_atomic(path, contents[i % 2])
    print(f"done {i % 2}", flush=True)
    i += 1
"""


def kills(count: int) -> int:
    """How many kills per host: ``count``, or more when bench/faults.py runs with --long."""
    return count * (2 if os.environ.get("MEDIC_FAULTS_LONG") else 1)


def hammer(path: Path, n: int, extra: list[str], seed: int) -> tuple[int, int, int]:
    """Kill ``n`` writers at random moments; returns (whole, mid_write_kills, temp files left)."""
    rng = random.Random(seed)
    old = (b"# A\n" + b"a = 1\n" * SIZE)[:SIZE]
    new = (b"# B\n" + b"b = 2\n" * SIZE)[:SIZE]
    path.write_bytes(old)
    whole = mid = 0
    for _ in range(n):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, extra[0], str(path), str(SIZE), *extra[1:]],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        lines = out.split()
        mid += bool(lines) and lines[-2] == "start"  # killed between start and done: inside a write
        data = path.read_bytes()
        whole += data in (old, new)
    left = len([p for p in path.parent.iterdir() if p.name.startswith(".medic-")])
    return whole, mid, left


def test_local_writes_killed_at_random_moments_leave_old_or_new(tmp_path: Path) -> None:
    n = kills(30)
    whole, mid, left = hammer(tmp_path / "module.py", n, ["local"], seed=1)
    record_figure("kill mid-write (LocalHost)", survived=whole, total=n, partial_writes=n - whole,
                  mid_write=mid, temp_left=left)
    assert whole == n, f"{n - whole} of {n} kills left a partial file"
    assert mid >= n // 4, f"only {mid} kills landed inside a write"


def test_ssh_writes_killed_at_random_moments_leave_old_or_new(tmp_path: Path, sshd: SSHServer) -> None:
    n = kills(24)
    extra = ["ssh", sshd.target, sshd.config_path, sshd.known_hosts_path, sshd.key_path]
    whole, mid, left = hammer(tmp_path / "module.py", n, extra, seed=2)
    record_figure("kill mid-write (SSHHost)", survived=whole, total=n, partial_writes=n - whole,
                  mid_write=mid, temp_left=left)
    assert whole == n, f"{n - whole} of {n} kills left a partial file"
    assert mid >= n // 4, f"only {mid} kills landed inside a write"


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_a_killed_write_leaves_only_dot_medic_temp_files(tmp_path: Path, where: str,
                                                          request: pytest.FixtureRequest) -> None:
    """What a kill can leave behind: a ``.medic-*`` temp file next to the target, never a changed target."""
    extra = ["local"]
    if where == "ssh":
        sshd: SSHServer = request.getfixturevalue("sshd")
        extra = ["ssh", sshd.target, sshd.config_path, sshd.known_hosts_path, sshd.key_path]
    hammer(tmp_path / "module.py", 5, extra, seed=3)
    assert {p.name for p in tmp_path.iterdir() if not p.name.startswith(".medic-")} == {"module.py"}
