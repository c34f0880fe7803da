"""The transport seam: every tool talks to the target machine through a ``Host``.

``LocalHost`` runs on this machine with subprocess; ``SSHHost`` (tools/ssh.py) runs on a remote one with
paramiko; ``FunctionHost`` answers commands from a Python function, for unit tests of code that only needs a
few canned answers. All three speak the same protocol, so every tool is written once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tools.errors import CommandTimeout, HostError


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    duration: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def last_json(self) -> object:
        """The JSON a probe printed on its last line of stdout; None when that line is none or not JSON."""
        lines = self.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1]) if lines else None
        except ValueError:
            return None


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime: float
    mode: int
    is_dir: bool
    is_symlink: bool


Command = str | Sequence[str]


def as_shell(command: Command, cwd: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """One POSIX shell line for ``command``: a list is quoted word by word, a string is taken as shell."""
    line = command if isinstance(command, str) else shlex.join(command)
    if env:  # exported, so every command of a compound line sees it
        line = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + "; " + line
    if cwd:
        line = f"cd {shlex.quote(cwd)} || exit 1; {line}"
    return line


@runtime_checkable
class Host(Protocol):
    """What medic needs of a machine. Paths are the host's own (POSIX) paths."""

    name: str

    def run(
        self,
        command: Command,
        *,
        timeout: float = 60.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult: ...

    def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes: ...

    def write_bytes_atomic(self, path: str, data: bytes, mode: int | None = None) -> None: ...

    def stat(self, path: str) -> FileStat | None: ...

    def exists(self, path: str) -> bool: ...

    def realpath(self, path: str) -> str: ...

    def close(self) -> None: ...


def read_text(host: Host, path: str) -> str:
    return host.read_bytes(path).decode("utf-8", errors="replace")


# A command leads a process group of its own (a timeout kills all it started), so neither a Ctrl-C nor a `kill -9`
# of medic reaches it: it would run on, an import probe for many seconds. setpriv gives its shell a signal for
# when medic dies (PR_SET_PDEATHSIG), and the shell ends its whole group on it. The command runs as the shell's
# background job so the trap runs at once (a foreground one defers it), its stdin passed on by hand (a background
# job's is /dev/null). A job medic launches detaches with setsid and is not in that group.
_ENDS_WITH_MEDIC = 'exec 3<&0; trap "kill -KILL 0" TERM; /bin/sh -c "$1" <&3 3<&- & wait $!'


def local_argv(line: str) -> list[str]:
    """The argv that runs ``line`` on this machine, ended with medic where this machine can say so."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # no util-linux setpriv: the command outlives a killed medic, as it always did
        return ["/bin/sh", "-c", line]
    return [setpriv, "--pdeathsig", "TERM", "/bin/sh", "-c", _ENDS_WITH_MEDIC, "medic", line]


class LocalHost:
    """This machine. Commands go through ``/bin/sh -c`` so a command line means the same as over SSH."""

    name = "local"

    def run(
        self,
        command: Command,
        *,
        timeout: float = 60.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        line = as_shell(command, cwd=cwd, env=env)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                local_argv(line),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,  # its own process group, so a timeout kills the children too
            )
        except OSError as exc:
            raise HostError(f"could not start /bin/sh on this machine: {exc}") from exc
        try:
            out, err = proc.communicate(input=stdin or "", timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise CommandTimeout(f"command ran past {timeout:.0f}s and was killed: {line[:120]}") from exc
        return CommandResult(proc.returncode, out, err, time.monotonic() - start)

    def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read() if limit is None else fh.read(limit)
        except OSError as exc:
            raise HostError(f"cannot read {path}: {exc.strerror}") from exc

    def write_bytes_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Write to a temp file in the same folder, fsync, then rename: a reader sees old or new, never half."""
        folder = os.path.dirname(os.path.abspath(path))
        if mode is None:
            st = self.stat(path)
            mode = (st.mode & 0o7777) if st else 0o644
        try:
            fd, tmp = tempfile.mkstemp(prefix=".medic-", dir=folder)
        except OSError as exc:
            raise HostError(f"cannot write in {folder}: {exc.strerror}") from exc
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except OSError as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise HostError(f"cannot write {path}: {exc.strerror}") from exc

    def stat(self, path: str) -> FileStat | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostError(f"cannot stat {path}: {exc.strerror}") from exc
        import stat as stat_mod

        is_link = stat_mod.S_ISLNK(st.st_mode)
        if is_link:
            with contextlib.suppress(OSError):
                st = os.stat(path)
        return FileStat(st.st_size, st.st_mtime, st.st_mode, stat_mod.S_ISDIR(st.st_mode), is_link)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def close(self) -> None:
        pass


Responder = Callable[[str], CommandResult | tuple[int, str] | str]


class FunctionHost(LocalHost):
    """A host whose commands are answered by ``respond(command_line)``; files are an in-memory dict.

    For unit tests of logic that reads a few command outputs. Anything that must be real (a run, a patch on
    disk, SSH) is tested against LocalHost and SSHHost instead.
    """

    name = "function"

    def __init__(self, respond: Responder, files: Mapping[str, bytes] | None = None) -> None:
        self.respond = respond
        self.files: dict[str, bytes] = dict(files or {})
        self.commands: list[str] = []

    def run(
        self,
        command: Command,
        *,
        timeout: float = 60.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        line = as_shell(command, cwd=cwd, env=env)
        self.commands.append(line)
        answer = self.respond(line)
        if isinstance(answer, CommandResult):
            return answer
        if isinstance(answer, str):
            return CommandResult(0, answer, "", 0.0)
        return CommandResult(answer[0], answer[1], "", 0.0)

    def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        if path not in self.files:
            raise HostError(f"cannot read {path}: No such file or directory")
        data = self.files[path][offset:]
        return data if limit is None else data[:limit]

    def write_bytes_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        self.files[path] = bytes(data)

    def stat(self, path: str) -> FileStat | None:
        if path not in self.files:
            return None
        return FileStat(len(self.files[path]), 0.0, 0o100644, False, False)

    def exists(self, path: str) -> bool:
        return path in self.files

    def realpath(self, path: str) -> str:
        return os.path.normpath(path)
