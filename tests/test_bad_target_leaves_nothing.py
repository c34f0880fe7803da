"""Bad input to `medic run` through the real CLI leaves nothing behind: no session folder, lock, checkpoint or
trace, and no "session … — trace …" line for a trace that is never written; one `medic: ...` line, exit 2.
The host is checked on the host itself: directly here, and over real SSH (sshd on 127.0.0.1).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.fixtures_fake import medic_cli
from tests.fixtures_ssh import SSHServer

RUN = ["run", "--no-scan", "--no-canary", "--mode", "unattended"]


def bad_targets(tmp_path: Path) -> dict[str, tuple[str, str, str]]:
    """name: (--python, --workdir, what the one line says)."""
    work = tmp_path / "work"
    work.mkdir()
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    dangling = tmp_path / "dangling-python"
    dangling.symlink_to(tmp_path / "gone" / "python")
    return {
        "python missing": ("/nonexistent/bin/python", str(work), "does not exist"),
        "python dangling link": (str(dangling), str(work), "does not exist"),
        "python not executable": (str(plain), str(work), "not an executable file"),
        "python is a folder": (str(work), str(work), "not an executable file"),
        "workdir missing": ("/usr/bin/python3", str(tmp_path / "no-such-workdir"), "workdir"),
        "workdir is a file": ("/usr/bin/python3", str(plain), "workdir"),
    }


def assert_left_nothing(done: subprocess.CompletedProcess[str], home: Path, traces: Path, expect: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("medic: ") and expect in lines[0], done.stderr
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir()), list(home.rglob("*"))
    assert not (home / "checkpoints.sqlite").exists()
    assert not traces.exists() or not any(traces.iterdir()), list(traces.iterdir())


@pytest.mark.parametrize("name", ["python missing", "python dangling link", "python not executable",
                                  "python is a folder", "workdir missing", "workdir is a file", "patch root missing",
                                  "traces folder is a file"])
def test_bad_local_target_creates_nothing(tmp_path: Path, name: str) -> None:
    home, traces = tmp_path / "medic-home", tmp_path / "traces"
    more: list[str] = []
    if name == "patch root missing":
        python, workdir, expect = "/usr/bin/python3", str(tmp_path), "--patch-root"
        more = ["--patch-root", str(tmp_path / "no-such-root")]
    elif name == "traces folder is a file":
        python, workdir, expect = "/usr/bin/python3", str(tmp_path), "cannot write the trace"
        (tmp_path / "blocker").write_text("a file where the traces folder should be\n")
        traces = tmp_path / "blocker" / "traces"
    else:
        python, workdir, expect = bad_targets(tmp_path)[name]
    done = medic_cli(*RUN, "--session", "bad", "--traces", str(traces), "--python", python, "--workdir", workdir,
                     *more, "--", "true", env={"MEDIC_HOME": str(home), "HOME": str(tmp_path / "home-dir")})
    assert_left_nothing(done, home, traces, expect)


def test_unknown_ssh_alias_creates_nothing(tmp_path: Path) -> None:
    home, traces = tmp_path / "medic-home", tmp_path / "traces"
    done = medic_cli(*RUN, "--session", "alias", "--traces", str(traces), "--host", "no-such-alias.invalid",
                     "--python", "/usr/bin/python3", "--workdir", "/tmp", "--", "true",
                     env={"MEDIC_HOME": str(home), "HOME": str(tmp_path / "home-dir")}, timeout=120)
    assert_left_nothing(done, home, traces, "cannot resolve")


@pytest.mark.ssh
@pytest.mark.parametrize("name", ["python missing", "workdir missing", "python not executable"])
def test_bad_ssh_target_creates_nothing(sshd: SSHServer, tmp_path: Path, name: str) -> None:
    """Checked on the remote host (the same machine here, reached through sshd and SFTP)."""
    python, workdir, expect = bad_targets(tmp_path)[name]
    home, traces = tmp_path / "medic-home", tmp_path / "traces"
    done = medic_cli(*RUN, "--session", "bad-ssh", "--traces", str(traces), "--host", sshd.alias,
                     "--python", python, "--workdir", workdir, "--", "true",
                     env={"MEDIC_HOME": str(home), "MEDIC_SSH_CONFIG": sshd.config_path}, timeout=120)
    assert_left_nothing(done, home, traces, expect)
    assert f"on {sshd.alias}" in done.stderr, done.stderr  # said of the remote host, not of this machine


def test_after_a_typo_the_same_session_id_starts(tmp_path: Path) -> None:
    """A bad --python leaves no session behind to block its id: the corrected command runs under it."""
    home, traces, work = tmp_path / "medic-home", tmp_path / "traces", tmp_path / "work"
    work.mkdir()
    env = {"MEDIC_HOME": str(home)}
    job = ["--session", "retry", "--traces", str(traces), "--workdir", str(work), "--validate", "true", "--",
           "/usr/bin/python3", "-c", "print('ok')"]
    typo = medic_cli(*RUN, "--python", "/usr/bin/pyhton3", *job, env=env)
    assert_left_nothing(typo, home, traces, "does not exist")
    done = medic_cli(*RUN, "--python", "/usr/bin/python3", *job, env=env)
    assert done.returncode == 0, done.stderr
    assert (home / "sessions" / "retry" / "config.json").exists() and (traces / "retry.jsonl").exists()
