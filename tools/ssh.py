"""``SSHHost``: the Host protocol over paramiko, for a machine named the way ``ssh`` would name it.

Three promises matter for a days-long job on a remote GPU box:

* an unknown or changed host key is refused before authentication, so no command ever reaches an impostor;
  trust-on-first-use happens only when asked (``trust_new_host``), and a *changed* key is never trusted;
* only getting a channel is retried (the link may be down for a while); a command that was sent is never
  re-sent, because it may already have had its effect;
* a command past its deadline is killed with its whole process group, not merely abandoned.

Reading the target and the ssh config, the known-hosts policy and the authenticated connect live in
tools/ssh_config.py (``SSHTarget`` and ``resolve_target`` are re-exported here); how a command leads its own
process group, and how that group is killed, in tools/ssh_group.py.
"""

from __future__ import annotations

import contextlib
import posixpath
import select
import shlex
import socket
import stat as stat_mod
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar

import paramiko
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from tools.errors import CommandTimeout, HostError, HostUnreachable, UsageError
from tools.host import Command, CommandResult, FileStat, as_shell
from tools.ssh_config import SSHTarget, connect_client, resolve_target
from tools.ssh_group import GROUP_KILL, grouped

__all__ = ["SSHHost", "SSHTarget", "resolve_target"]

T = TypeVar("T")
CHUNK = 32768  # the largest SFTP read OpenSSH answers in one packet
LINK_ERRORS = (paramiko.SSHException, EOFError, OSError)

def _is_link_error(exc: BaseException) -> bool:
    """True for a link that is down or dropped; False for a refusal that retrying cannot change."""
    if isinstance(exc, HostUnreachable):
        return True
    refusals = (HostError, UsageError, paramiko.AuthenticationException, paramiko.BadHostKeyException,
                paramiko.ssh_exception.IncompatiblePeer, socket.gaierror)
    if isinstance(exc, refusals):
        return False
    if isinstance(exc, paramiko.ChannelException):  # only "connect failed": a jump host cannot reach it yet
        return exc.code == paramiko.common.OPEN_FAILED_CONNECT_FAILED
    return isinstance(exc, LINK_ERRORS)


class SSHHost:
    """A remote machine, connected at once. ``target``: an ssh config alias or ``user@host[:port]``."""

    def __init__(self, target: str, *, config_path: str | None = None, known_hosts_path: str | None = None,
                 key_filename: str | None = None, trust_new_host: bool = False, connect_timeout: float = 10.0,
                 keepalive: float = 15.0, retry_for: float = 60.0, proxy_jump: str | None = None) -> None:
        self.name = target
        self.target = resolve_target(target, config_path, known_hosts_path, key_filename, proxy_jump)
        self._jump_options = dict(config_path=config_path, known_hosts_path=known_hosts_path,
                                  key_filename=key_filename, trust_new_host=trust_new_host)
        self.trust_new_host, self.connect_timeout = trust_new_host, connect_timeout
        self.keepalive, self.retry_for = keepalive, retry_for
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._jump: SSHHost | None = None
        self._lock = threading.RLock()
        self._sftp_lock = threading.Lock()
        self.reconnect()

    def reconnect(self) -> None:
        """Drop whatever link there is and connect again (retried for ``retry_for`` seconds)."""
        with self._lock:
            self._discard()
        self._with_retry(lambda transport: None)

    def drop_connection(self) -> None:
        """Cut the TCP link as a network failure would; the next call reconnects."""
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is not None:
                transport.close()

    def close(self) -> None:
        with self._lock:
            self._discard()
            if self._jump is not None:
                self._jump.close()
                self._jump = None

    def _discard(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _live_transport(self) -> paramiko.Transport:
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                self._discard()
                self._client = self._connect_once()
                transport = self._client.get_transport()
            assert transport is not None
            return transport

    def _connect_once(self) -> paramiko.SSHClient:
        target, sock = self.target, None
        if target.proxy_jump:
            hops = [hop.strip() for hop in target.proxy_jump.split(",")]
            if self._jump is None:  # retry_for=0: it tries once per attempt of ours, the only retry layer
                self._jump = SSHHost(hops[-1], proxy_jump=",".join(hops[:-1]) or "none", retry_for=0,
                                     connect_timeout=self.connect_timeout, keepalive=self.keepalive,
                                     **self._jump_options)  # type: ignore[arg-type]
            where = (target.hostname, target.port)
            sock = self._jump._with_retry(lambda t: t.open_channel(
                "direct-tcpip", where, ("127.0.0.1", 0), timeout=self.connect_timeout))
        client = connect_client(target, sock, trust_new_host=self.trust_new_host, timeout=self.connect_timeout)
        transport = client.get_transport()
        if transport is not None and self.keepalive > 0:
            transport.set_keepalive(max(1, int(self.keepalive)))
        return client

    def _with_retry(self, open_channel: Callable[[paramiko.Transport], T]) -> T:
        """The one retry layer: connect if needed, then open a channel. Nothing that ran is repeated."""

        def attempt() -> T:
            transport = self._live_transport()
            try:
                return open_channel(transport)
            except LINK_ERRORS:
                if not transport.is_active():
                    with self._lock:
                        self._discard()
                raise

        retrying = Retrying(retry=retry_if_exception(_is_link_error), stop=stop_after_delay(self.retry_for),
                            wait=wait_exponential(multiplier=0.2, min=0.2, max=2.0), reraise=True)
        try:
            return retrying(attempt)
        except HostError:
            raise
        except socket.gaierror as exc:
            raise UsageError(f"cannot resolve {self.target.hostname!r} from {self.name!r}: not an ssh config"
                             f" alias, nor a host name ({exc})") from exc
        except LINK_ERRORS as exc:
            reason = str(exc) or type(exc).__name__
            if _is_link_error(exc):
                raise HostUnreachable(f"cannot reach {self.name} ({self.target.known_name}) within "
                                      f"{self.retry_for:.0f}s: {reason}") from exc
            raise HostError(f"{self.name} refused: {reason}") from exc

    def _dropped(self, what: str) -> HostUnreachable:
        with self._lock:
            self._discard()
        return HostUnreachable(f"connection to {self.name} dropped during {what}; not repeated, as it may "
                               "already have taken effect")

    def run(self, command: Command, *, timeout: float = 60.0, cwd: str | None = None,
            env: Mapping[str, str] | None = None, stdin: str | None = None) -> CommandResult:
        line = as_shell(command, cwd=cwd, env=env)
        start, what = time.monotonic(), f"`{line[:80]}`"
        channel = self._with_retry(lambda t: t.open_session(timeout=self.connect_timeout))
        transport, raw, err = channel.get_transport(), bytearray(), bytearray()
        try:
            try:
                channel.exec_command(grouped(line))
                if stdin:
                    channel.sendall(stdin.encode("utf-8"))
                channel.shutdown_write()
            except LINK_ERRORS:
                raise self._dropped(what) from None
            while True:
                # Trailing output may arrive after the exit status, so wait for EOF as well.
                finished = channel.eof_received and channel.exit_status_ready()
                while channel.recv_ready():
                    raw += channel.recv(CHUNK)
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(CHUNK)
                if finished:
                    break
                if not transport.is_active():
                    raise self._dropped(what)
                left = start + timeout - time.monotonic()
                if left <= 0:
                    self._kill_group(bytes(raw))
                    raise CommandTimeout(f"command ran past {timeout:.0f}s on {self.name} and was killed: "
                                         f"{line[:120]}")
                if channel.eof_received:  # the data pipe stays readable after EOF: wait on the status
                    channel.status_event.wait(min(left, 0.1))
                else:
                    select.select([channel], [], [], min(left, 0.1))
            exit_code = channel.recv_exit_status()
        finally:
            channel.close()
        stdout = bytes(raw).partition(b"\n")[2]  # drop the group id line
        return CommandResult(exit_code, stdout.decode("utf-8", errors="replace"),
                             err.decode("utf-8", errors="replace"), time.monotonic() - start)

    def _kill_group(self, raw: bytes) -> None:
        group, newline, _ = raw.partition(b"\n")
        if newline and group.strip().isdigit():  # else the command never started: closing the channel is all
            with contextlib.suppress(HostError):  # the timeout that follows is the news; keep it
                self.run(GROUP_KILL.format(g=int(group)), timeout=15.0)

    def realpath(self, path: str) -> str:
        # SFTP's normalize does not resolve every symlink, so ask the host itself.
        quoted = shlex.quote(path)
        result = self.run(f"realpath -m -- {quoted} 2>/dev/null || readlink -f -- {quoted}", timeout=30.0)
        if not result.ok or not result.stdout.strip():
            raise HostError(f"cannot resolve {path} on {self.name}: {result.stderr.strip() or 'no realpath'}")
        return result.stdout.rstrip("\n")

    def _sftp_call(self, what: str, path: str, call: Callable[[paramiko.SFTPClient], T]) -> T:
        with self._sftp_lock:
            sftp = self._sftp
            channel = sftp.get_channel() if sftp else None
            if sftp is None or channel is None or not channel.get_transport().is_active():
                sftp = self._sftp = self._with_retry(paramiko.SFTPClient.from_transport)
            assert sftp is not None
            try:
                return call(sftp)
            except LINK_ERRORS as exc:
                link = sftp.get_channel()
                if link is None or not link.get_transport().is_active():
                    raise self._dropped(f"{what} {path}") from exc
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise HostError(f"cannot {what} {path} on {self.name}: {reason}") from exc

    def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        def read(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(path, "rb") as fh:
                size = fh.stat().st_size or 0
                end = size if limit is None else min(size, offset + limit)
                # readv pipelines the requests: about one round trip per call, not one per 32 KiB.
                chunks = [(pos, min(CHUNK, end - pos)) for pos in range(offset, end, CHUNK)]
                return b"".join(fh.readv(chunks)) if chunks else b""

        return self._sftp_call("read", path, read)

    def write_bytes_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Write a temp file in the same folder, then rename it over: a reader sees old or new, never half."""
        tmp = posixpath.join(posixpath.dirname(path) or ".", f".medic-{uuid.uuid4().hex[:12]}")

        def write(sftp: paramiko.SFTPClient) -> None:
            keep = mode
            if keep is None:
                try:
                    keep = (sftp.stat(path).st_mode or 0o644) & 0o7777
                except FileNotFoundError:
                    keep = 0o644
            try:
                with sftp.open(tmp, "wbx") as fh:
                    fh.set_pipelined(True)
                    fh.write(data)
                sftp.chmod(tmp, keep)
                sftp.posix_rename(tmp, path)
            except BaseException:
                with contextlib.suppress(*LINK_ERRORS):
                    sftp.remove(tmp)
                raise

        self._sftp_call("write", path, write)

    def stat(self, path: str) -> FileStat | None:
        def lstat(sftp: paramiko.SFTPClient) -> FileStat | None:
            try:
                st = sftp.lstat(path)
            except FileNotFoundError:
                return None
            is_link = stat_mod.S_ISLNK(st.st_mode or 0)
            if is_link:
                with contextlib.suppress(FileNotFoundError):  # dangling: describe the link, as LocalHost does
                    st = sftp.stat(path)
            mode = st.st_mode or 0
            return FileStat(st.st_size or 0, float(st.st_mtime or 0), mode, stat_mod.S_ISDIR(mode), is_link)

        return self._sftp_call("stat", path, lstat)

    def exists(self, path: str) -> bool:
        return self.stat(path) is not None
