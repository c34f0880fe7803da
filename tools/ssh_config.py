"""Where an ``SSHHost`` connects, and whose host keys it believes.

``resolve_target`` reads a target the way ``ssh`` would (an ssh config alias, or ``user@host[:port]``, the
config's HostName/Port/User/IdentityFile/ProxyJump filling the gaps). ``KnownHostsPolicy`` refuses a host
that known_hosts does not list, unless trust-on-first-use was asked for; a *changed* key never reaches it
(paramiko raises BadHostKeyException), so it is never trusted. ``connect_client`` makes one authenticated
client with that policy and says in plain words why a key was refused.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass

import paramiko

from tools.errors import HostError, HostKeyError, UsageError


@dataclass(frozen=True)
class SSHTarget:
    """Where to connect, once the target string and the ssh config have been read."""

    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool
    proxy_jump: str | None
    known_hosts: str

    @property
    def known_name(self) -> str:
        """The name known_hosts uses: ``host`` on port 22, ``[host]:port`` elsewhere."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def resolve_target(target: str, config_path: str | None = None, known_hosts_path: str | None = None,
                   key_filename: str | None = None, proxy_jump: str | None = None) -> SSHTarget:
    """``alias`` or ``user@host[:port]``; the config's HostName/Port/User/IdentityFile/ProxyJump fill gaps."""
    user, _, rest = target.rpartition("@")
    if rest.startswith("["):
        alias, _, tail = rest[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        alias, _, port_text = rest.partition(":") if rest.count(":") == 1 else (rest, "", "")
    if not alias or (port_text and not port_text.isdigit()):
        raise UsageError(f"cannot read ssh target {target!r}: want an ssh config alias or user@host[:port]")
    config_file = os.path.expanduser(config_path or "~/.ssh/config")
    try:
        config = paramiko.SSHConfig.from_path(config_file) if os.path.exists(config_file) else None
    except (OSError, paramiko.SSHException) as exc:
        raise UsageError(f"cannot read ssh config {config_file}: {exc}") from exc
    found = config.lookup(alias) if config else paramiko.SSHConfigDict(hostname=alias)
    keys = [key_filename] if key_filename else []
    keys += [os.path.expanduser(path) for path in found.get("identityfile", [])]
    jump = proxy_jump if proxy_jump is not None else found.get("proxyjump")
    known = known_hosts_path or (found.get("userknownhostsfile") or "~/.ssh/known_hosts").split()[0]
    return SSHTarget(
        hostname=found.get("hostname", alias),
        port=int(port_text or found.get("port", "22")),
        user=user or found.get("user") or getpass.getuser(),
        identity_files=tuple(dict.fromkeys(path for path in keys if os.path.exists(path))),
        identities_only=found.get("identitiesonly", "no").lower() == "yes",
        proxy_jump=None if (jump or "none").lower() == "none" else jump,
        known_hosts=os.path.expanduser(known),
    )


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko calls this only for a host with no entry at all; a mismatch raises BadHostKeyException."""

    def __init__(self, target: SSHTarget, trust_new_host: bool) -> None:
        self.target, self.trust_new_host = target, trust_new_host

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        known, port = self.target.known_hosts, self.target.port
        if not self.trust_new_host:
            raise HostKeyError(
                f"unknown host key for {hostname} ({key.get_name()} {key.fingerprint}), not in {known}: check"
                f" it, then add it with `ssh-keyscan -p {port} {self.target.hostname} >> {known}` or connect"
                " once with --trust-new-host")
        os.makedirs(os.path.dirname(known) or ".", mode=0o700, exist_ok=True)
        with open(known, "a+b") as fh:
            ends_open = fh.tell() > 0 and (fh.seek(-1, os.SEEK_END) or fh.read(1)) != b"\n"
            fh.write(b"\n" * ends_open + f"{hostname} {key.get_name()} {key.get_base64()}\n".encode())
        client.get_host_keys().add(hostname, key.get_name(), key)


def connect_client(target: SSHTarget, sock: paramiko.Channel | None, *, trust_new_host: bool,
                   timeout: float) -> paramiko.SSHClient:
    """One authenticated client, or HostKeyError (unknown or changed key) / HostError (keys refused)."""
    client = paramiko.SSHClient()
    if os.path.exists(target.known_hosts):
        client.load_host_keys(target.known_hosts)
    client.set_missing_host_key_policy(KnownHostsPolicy(target, trust_new_host))
    try:
        client.connect(
            target.hostname, target.port, target.user, sock=sock,
            key_filename=list(target.identity_files) or None,  # type: ignore[arg-type]
            allow_agent=not target.identities_only, look_for_keys=not target.identities_only,
            timeout=timeout, banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout)
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyError(
            f"host key for {target.known_name} CHANGED: the server offers {exc.key.get_name()} "
            f"{exc.key.fingerprint}, {target.known_hosts} has {exc.expected_key.fingerprint}; refusing to"
            f" connect. If the host was really reinstalled: `ssh-keygen -R '{target.known_name}' -f "
            f"{target.known_hosts}`, then add the new key with ssh-keyscan") from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise HostError(f"{target.user}@{target.known_name} refused our keys "
                        f"({', '.join(target.identity_files) or 'agent/default keys'}): {exc}") from None
    except BaseException:
        client.close()
        raise
    return client
