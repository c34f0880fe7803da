"""--notify and medic watch/status on the fake target (seconds, no vLLM): told once per event — waiting for a
person, ended, stopped — with the right environment; a failing notify command changes nothing but the trace;
`medic watch` from another process ends with the exit code `medic run` gave; SIGTERM stops medic cleanly."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.fixtures_fake import Fake, MakeFake, medic_cli, spawn_medic
from tools import runs
from tools.host import LocalHost


def notify_command(folder: Path, fail: bool = False) -> str:
    """Writes its whole environment to a new file per call, named after the event; exits 3 when ``fail``."""
    return f"env > {folder}/told.$MEDIC_EVENT.$$" + ("; echo 'no route to the chat server' >&2; exit 3" if fail else "")


def told(folder: Path) -> list[dict[str, str]]:
    calls = sorted(folder.glob("told.*"), key=lambda p: p.stat().st_mtime_ns)
    return [dict(line.split("=", 1) for line in p.read_text().splitlines() if "=" in line) for p in calls]


def wait_for(fake: Fake, kind: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while kind not in fake.kinds():
        assert time.monotonic() < deadline, f"no {kind} event: {fake.kinds()}"
        time.sleep(0.1)


def test_told_when_waiting_then_when_ended_and_watch_ends_with_the_same_code(make_fake: MakeFake,
                                                                             tmp_path: Path) -> None:
    fake = make_fake(session_id="wait", mode="approve", seconds=1.0, env={"JOB_TOKEN": "s3cret-value-123"})
    watcher = spawn_medic("watch", "wait")
    started = medic_cli("resume", "wait", "--notify", notify_command(tmp_path), env={"COLUMNS": "40"})
    watched = watcher.communicate(timeout=120)[1]  # medic speaks on stderr
    assert started.returncode == 5, started.stderr  # waiting for a person
    assert watcher.returncode == 5, watched
    for output in (started.stderr, watched):
        assert "\x1b" not in output and "\r" not in output
        fault = next(line for line in output.splitlines() if line.startswith("fault [crash]"))
        assert fault.endswith("at fakecaller/__init__.py:5"), fault  # one line, though COLUMNS says 40
    calls = told(tmp_path)
    assert [c["MEDIC_EVENT"] for c in calls] == ["waiting"]
    assert (calls[0]["MEDIC_SESSION"], calls[0]["MEDIC_OUTCOME"], calls[0]["MEDIC_EXIT_CODE"]) == ("wait", "waiting",
                                                                                                   "5")
    assert calls[0]["MEDIC_SUMMARY"] == "wait: waiting — waits for a patch to approve: `medic approve wait`"
    assert "JOB_TOKEN" not in calls[0] and "s3cret" not in json.dumps(calls)

    status = json.loads(medic_cli("status", "wait", "--json").stdout)
    assert (status["state"], status["exit_code"]) == ("waiting", 5)

    answered = medic_cli("approve", "wait", "--yes")  # the session goes on; the saved --notify is told again
    assert answered.returncode == 0, answered.stderr
    calls = told(tmp_path)
    assert [c["MEDIC_EVENT"] for c in calls] == ["waiting", "ended"]
    assert (calls[1]["MEDIC_OUTCOME"], calls[1]["MEDIC_EXIT_CODE"]) == ("verified", "0")
    assert [e["event"] for e in fake.events("notify")] == ["waiting", "ended"]
    assert all(e["ok"] for e in fake.events("notify"))


def test_stopped_is_told_a_failing_command_is_only_recorded(make_fake: MakeFake, tmp_path: Path) -> None:
    fake = make_fake(session_id="stop", mode="unattended", seconds=20.0)
    medic = spawn_medic("resume", "stop", "--notify", notify_command(tmp_path, fail=True))
    try:
        wait_for(fake, "launch")
        medic.send_signal(signal.SIGTERM)
        _, err = medic.communicate(timeout=60)
    finally:
        for folder in fake.run_dirs():  # the job is detached and goes on: this test ends it
            runs.stop(LocalHost(), runs.Run.in_dir(str(folder)), grace=1.0)
    assert medic.returncode == 9, err  # stopped: the exit code of agent/outcomes.py, whatever notify said
    assert "  notify (stopped): FAILED exit 3: no route to the chat server" in err.splitlines(), err
    assert "medic stopped: `medic resume stop` goes on (a job it launched keeps running)" in err.splitlines()
    calls = told(tmp_path)
    assert [(c["MEDIC_EVENT"], c["MEDIC_OUTCOME"], c["MEDIC_EXIT_CODE"]) for c in calls] == [("stopped", "stopped",
                                                                                               "9")]
    assert fake.kinds()[-2:] == ["stopped", "notify"]
    assert fake.events("notify")[0]["ok"] is False
    status = json.loads(medic_cli("status", "stop", "--json").stdout)
    assert (status["state"], status["exit_code"]) == ("stopped", 9)
    assert medic_cli("watch", "stop").returncode == 9
