"""A real OpenSSH server on 127.0.0.1 for the tests, and the ``host`` fixture that runs a test on both hosts.

The server is the system's ``/usr/sbin/sshd`` with its own config, keys and port in a temp folder: key-only
auth, host key pinned in a known_hosts file of its own, so nothing here touches ~/.ssh.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tools.host import Host, LocalHost
from tools.ssh import SSHHost

SSHD = "/usr/sbin/sshd"
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def keygen(path: Path) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                   check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class SSHServer:
    """One sshd on ``host:port`` that lets ``user`` in with the key at ``key_path``."""

    folder: Path
    host: str
    port: int
    user: str
    key_path: str
    known_hosts_path: str
    config_path: str
    alias: str
    host_public_key: str
    log_path: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def start(self) -> None:
        """Start sshd and wait until it answers with an SSH banner."""
        if self.process is not None and self.process.poll() is None:
            return
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")],
                                        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"sshd exited with {self.process.returncode}: {Path(self.log_path).read_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"sshd did not answer on {self.host}:{self.port} within 10s: {self.log_path}")

    def stop(self) -> None:
        """Stop listening. Sessions already open live on in their own sshd processes, as on a real host."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def connect(self, **options: Any) -> SSHHost:
        """An SSHHost for this server by ``user@host:port``; ``options`` override the test paths."""
        settings: dict[str, Any] = dict(config_path=self.config_path, known_hosts_path=self.known_hosts_path,
                                        key_filename=self.key_path, connect_timeout=5.0, retry_for=5.0)
        settings.update(options)
        return SSHHost(self.target, **settings)


def _write_sshd_config(folder: Path, port: int) -> None:
    (folder / "sshd_config").write_text(f"""\
Port {port}
ListenAddress {LOOPBACK}
HostKey {folder}/host_ed25519
PidFile {folder}/sshd.pid
AuthorizedKeysFile {folder}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding yes
MaxStartups 100
MaxSessions 100
Subsystem sftp internal-sftp
LogLevel VERBOSE
""")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        pytest.fail(f"{SSHD} (or ssh-keygen) is missing: the SSH tests need a real OpenSSH server; "
                    "install it with `apt-get install openssh-server`")
    folder = tmp_path_factory.mktemp("sshd")
    folder.chmod(0o700)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    host_key = keygen(folder / "host_ed25519").split()
    (folder / "authorized_keys").write_text(keygen(folder / "user_ed25519") + "\n")
    port, user = free_port(), getpass.getuser()
    _write_sshd_config(folder, port)
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(f"[{LOOPBACK}]:{port} {host_key[0]} {host_key[1]}\n")
    config = folder / "ssh_config"
    config.write_text(f"""\
Host medic-test
    HostName {LOOPBACK}
    Port {port}
    User {user}
    IdentityFile {folder}/user_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}

Host medic-test-jump
    HostName {LOOPBACK}
    Port {port}
    User {user}
    IdentityFile {folder}/user_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}
    ProxyJump medic-test
""")
    server = SSHServer(folder=folder, host=LOOPBACK, port=port, user=user,
                       key_path=str(folder / "user_ed25519"), known_hosts_path=str(known_hosts),
                       config_path=str(config), alias="medic-test", host_public_key=" ".join(host_key[:2]),
                       log_path=str(folder / "sshd.log"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["local", "ssh"])
def host(request: pytest.FixtureRequest) -> Iterator[Host]:
    """Every Host-level test runs twice: on this machine, and over SSH to the test sshd."""
    if request.param == "local":
        yield LocalHost()
        return
    server: SSHServer = request.getfixturevalue("sshd")
    ssh_host = server.connect()
    try:
        yield ssh_host
    finally:
        ssh_host.close()
