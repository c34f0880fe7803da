"""The Host protocol, on this machine and over a real sshd; then what only SSHHost promises."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures_ssh import SSHServer, keygen
from tools.errors import CommandTimeout, HostError, HostKeyError, HostUnreachable
from tools.host import Host
from tools.ssh import SSHHost


def process_alive(pid: int) -> bool:
    """Running and not a zombie: this sandbox's init never reaps orphans, so a dead one may linger as Z."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_until(check: object, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.05)
    return False


# -- both hosts ---------------------------------------------------------------------------------------------

def test_run_reports_exit_code_stdout_and_stderr(host: Host) -> None:
    result = host.run("printf 'out\\n'; printf 'err\\n' >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.ok) == (3, "out\n", "err\n", False)


def test_run_passes_stdin_cwd_env_and_quotes_lists(host: Host, tmp_path: Path) -> None:
    # as_shell puts env in front of the first simple command only, so the script is one command here.
    script = ["/bin/sh", "-c", 'pwd; echo "$GREETING"; cat']
    result = host.run(script, cwd=str(tmp_path), env={"GREETING": "a b"}, stdin="in\n")
    assert result.stdout == f"{tmp_path}\na b\nin\n"
    assert host.run(["printf", "%s|", "it's", "$HOME"]).stdout == "it's|$HOME|"


def test_a_command_past_its_deadline_raises_and_is_gone(host: Host, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    start = time.monotonic()
    with pytest.raises(CommandTimeout):
        host.run(f"echo $$ > {pid_file}; exec sleep 30", timeout=1.0)
    assert time.monotonic() - start < 5.0
    assert wait_until(lambda: not process_alive(int(pid_file.read_text())))


def test_write_bytes_atomic_replaces_content_and_keeps_mode(host: Host, tmp_path: Path) -> None:
    target = tmp_path / "model.py"
    target.write_text("old\n")
    target.chmod(0o640)
    host.write_bytes_atomic(str(target), b"new\n")
    assert target.read_bytes() == b"new\n"
    assert target.stat().st_mode & 0o7777 == 0o640
    host.write_bytes_atomic(str(tmp_path / "fresh"), b"x")
    host.write_bytes_atomic(str(tmp_path / "tool"), b"#!/bin/sh\n", mode=0o755)
    assert (tmp_path / "fresh").stat().st_mode & 0o7777 == 0o644
    assert (tmp_path / "tool").stat().st_mode & 0o7777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "model.py", "tool"]  # no temp left over


def test_write_bytes_atomic_into_a_missing_folder_fails_cleanly(host: Host, tmp_path: Path) -> None:
    with pytest.raises(HostError) as caught:
        host.write_bytes_atomic(str(tmp_path / "nope" / "file"), b"x")
    assert not isinstance(caught.value, HostUnreachable)


def test_read_bytes_honours_offset_and_limit(host: Host, tmp_path: Path) -> None:
    data = os.urandom(200_000)  # several SFTP requests' worth
    (tmp_path / "blob").write_bytes(data)
    path = str(tmp_path / "blob")
    assert host.read_bytes(path) == data
    assert host.read_bytes(path, 70_000, 100_000) == data[70_000:170_000]
    assert host.read_bytes(path, 199_990) == data[199_990:]
    assert host.read_bytes(path, 300_000, 10) == b""
    with pytest.raises(HostError) as caught:
        host.read_bytes(str(tmp_path / "missing"))
    assert not isinstance(caught.value, HostUnreachable)


def test_stat_exists_and_realpath_see_through_symlinks(host: Host, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "file").write_bytes(b"12345")
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")

    file_stat = host.stat(str(real / "file"))
    assert file_stat is not None
    assert (file_stat.size, file_stat.is_dir, file_stat.is_symlink) == (5, False, False)
    linked = host.stat(str(tmp_path / "link"))
    assert linked is not None and linked.is_dir and linked.is_symlink
    assert host.stat(str(tmp_path / "missing")) is None
    assert host.exists(str(tmp_path / "dangling")) and not host.exists(str(tmp_path / "missing"))
    assert host.realpath(str(tmp_path / "link" / "file")) == str(real / "file")
    assert host.realpath(str(tmp_path / "link" / ".." / "link")) == str(real)


# -- SSH only -----------------------------------------------------------------------------------------------

def accepted_logins(sshd: SSHServer) -> int:
    time.sleep(0.2)  # sshd's session process writes the line on its own time
    return Path(sshd.log_path).read_text().count("Accepted publickey")


def test_unknown_host_key_is_refused_before_logging_in(sshd: SSHServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    marker, before = tmp_path / "ran", accepted_logins(sshd)
    with pytest.raises(HostKeyError) as caught:
        sshd.connect(known_hosts_path=str(empty)).run(f"touch {marker}")
    message = str(caught.value)
    assert "unknown host key" in message and "SHA256:" in message
    assert "ssh-keyscan" in message and "--trust-new-host" in message and "\n" not in message
    assert accepted_logins(sshd) == before and not marker.exists()
    assert empty.read_text() == ""


def test_changed_host_key_is_refused_even_when_trusting_new_hosts(sshd: SSHServer, tmp_path: Path) -> None:
    impostor = keygen(tmp_path / "other_host_key").split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[{sshd.host}]:{sshd.port} {impostor[0]} {impostor[1]}\n")
    marker, before = tmp_path / "ran", accepted_logins(sshd)
    for trust in (False, True):
        with pytest.raises(HostKeyError, match=r"CHANGED.*ssh-keygen -R"):
            sshd.connect(known_hosts_path=str(known), trust_new_host=trust).run(f"touch {marker}")
    assert accepted_logins(sshd) == before and not marker.exists()
    assert known.read_text().split()[2] == impostor[1]


def test_trust_new_host_records_the_key_for_next_time(sshd: SSHServer, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    first = sshd.connect(known_hosts_path=str(known), trust_new_host=True)
    assert first.run("echo hi").stdout == "hi\n"
    first.close()
    assert known.read_text() == f"[{sshd.host}]:{sshd.port} {sshd.host_public_key}\n"
    second = sshd.connect(known_hosts_path=str(known))
    assert second.run("echo again").stdout == "again\n"
    second.close()


def test_an_ssh_config_alias_supplies_hostname_port_user_and_key(sshd: SSHServer) -> None:
    host = SSHHost(sshd.alias, config_path=sshd.config_path, retry_for=2.0)
    try:
        target = host.target
        assert (target.hostname, target.port, target.user) == (sshd.host, sshd.port, sshd.user)
        assert target.identity_files == (sshd.key_path,) and target.known_hosts == sshd.known_hosts_path
        assert host.run("echo $SSH_CONNECTION").stdout.split()[2:] == [sshd.host, str(sshd.port)]
    finally:
        host.close()


def test_proxy_jump_goes_through_the_jump_host(sshd: SSHServer) -> None:
    host = SSHHost("medic-test-jump", config_path=sshd.config_path, retry_for=2.0)
    try:
        assert host.target.proxy_jump == "medic-test"
        # Through a direct-tcpip channel the target sees the jump host's sshd as its client.
        client_port = int(host.run("echo $SSH_CONNECTION").stdout.split()[1])
        assert host.run("echo via jump").stdout == "via jump\n"
        assert client_port != sshd.port
    finally:
        host.close()


def test_a_command_past_its_deadline_takes_its_children_along(sshd: SSHServer, tmp_path: Path) -> None:
    host, child = sshd.connect(), tmp_path / "child"
    try:
        with pytest.raises(CommandTimeout):
            host.run(f"sleep 30 & echo $! > {child}; wait", timeout=1.0)
        assert wait_until(lambda: not process_alive(int(child.read_text())))
        assert host.run("echo still usable").ok
    finally:
        host.close()


def test_a_failing_command_is_not_retried(sshd: SSHServer, tmp_path: Path) -> None:
    host, counter = sshd.connect(), tmp_path / "counter"
    try:
        assert host.run(f"echo run >> {counter}; exit 9").exit_code == 9
        assert counter.read_text() == "run\n"
    finally:
        host.close()


def test_a_link_dropped_mid_command_raises_and_the_command_is_not_sent_again(
        sshd: SSHServer, tmp_path: Path) -> None:
    host, counter = sshd.connect(), tmp_path / "counter"
    try:
        threading.Timer(0.8, host.drop_connection).start()
        start = time.monotonic()
        with pytest.raises(HostUnreachable, match="not repeated"):
            host.run(f"echo run >> {counter}; sleep 5", timeout=20.0)
        assert time.monotonic() - start < 4.0
        assert host.run("echo reconnected").stdout == "reconnected\n"  # the next call reconnects by itself
        assert counter.read_text() == "run\n"
    finally:
        host.close()


def test_a_server_down_for_a_while_is_waited_for(sshd: SSHServer) -> None:
    host = sshd.connect(retry_for=15.0)
    try:
        sshd.stop()
        host.drop_connection()
        restart = threading.Timer(1.5, sshd.start)
        restart.start()
        start = time.monotonic()
        assert host.run("echo back").stdout == "back\n"
        assert time.monotonic() - start >= 1.0
        restart.join()
    finally:
        sshd.start()
        host.close()


def test_a_server_down_for_too_long_is_reported_unreachable(sshd: SSHServer) -> None:
    host = sshd.connect(retry_for=1.0)
    try:
        sshd.stop()
        host.drop_connection()
        start = time.monotonic()
        with pytest.raises(HostUnreachable, match="cannot reach"):
            host.run("echo never")
        assert time.monotonic() - start < 5.0
    finally:
        sshd.start()
        host.close()
