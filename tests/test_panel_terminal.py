"""A session watched as a person would: `medic run` on the lab in a real terminal (tmux), `medic watch` from a
second process through a pipe, `medic status --json`, and `--notify`, all on one lab session — the lab from
pristine with the scan, held to the cascade (tests/lab_cascade.py) and `medic lab check`.

At the terminal the panel must show, during a load, which launch of how many it is, the phase and an ETA
(learned from an earlier session's load of the same command: the scan leaves the lab one launch, so a first
session runs before, and the lab is reset to pristine between them); through the pipe every event is one plain
line: no control code, nothing wrapped. Both end with the exit code of `medic run`; the notify command runs once,
for the end.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

from lab.build import LabPaths
from tests.fixtures_fake import MEDIC
from tests.lab_cascade import assert_the_cascade

ROOT = Path(__file__).resolve().parents[1]
PANEL_DURING_LOAD = re.compile(r"launch 1 of 12 \(target\) · phase (starting|importing|loading) for [\dhms. ]+, "
                               r"load ETA (\d+(\.\d)?s|\d+m \d\ds)")
SESSION_TIMEOUT = 900.0


def tmux(socket: str, *args: str) -> str:
    done = subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30)
    return done.stdout


def bottom_box(screen: str) -> bool:
    rows = [row for row in screen.splitlines() if row.strip()]
    return rows[-1].startswith("╰") and any(row.startswith("╭─ medic term · local · unattended") for row in rows)


def test_the_panel_in_a_terminal_and_the_same_session_through_a_pipe(private_lab: LabPaths, tmp_path: Path) -> None:
    home, traces, socket = tmp_path / "home", tmp_path / "traces", f"medic-test-{os.getpid()}"
    notified = tmp_path / "notified"
    env = {**os.environ, "MEDIC_HOME": str(home), "PYTHONPATH": str(ROOT)}
    notify = f"env > {shlex.quote(str(notified))}.$MEDIC_EVENT.$$"
    run = shlex.join([*MEDIC, "run", "--lab", str(private_lab.root), "--session", "term", "--traces", str(traces),
                      "--env", "JOB_API_KEY=hunter2-not-for-notify", "--notify", notify])
    rc_file = tmp_path / "rc"
    script = f"cd {shlex.quote(str(tmp_path))} && {run}; echo $? > {shlex.quote(str(rc_file))}"
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k in ("MEDIC_HOME", "PYTHONPATH", "PATH"))
    earlier = subprocess.run([*MEDIC, "run", "--lab", str(private_lab.root), "--session", "before", "--traces",
                              str(traces)], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=SESSION_TIMEOUT)
    assert earlier.returncode == 0, earlier.stderr[-2000:]
    reset = subprocess.run([*MEDIC, "lab", "reset", "--path", str(private_lab.root)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert reset.returncode == 0, reset.stderr
    tmux(socket, "new-session", "-d", "-x", "160", "-y", "50", f"env {exports} TERM=xterm-256color sh -c "
         f"{shlex.quote(script)}; sleep 600")
    watcher = None
    try:
        deadline = time.monotonic() + SESSION_TIMEOUT
        while not (home / "sessions" / "term" / "config.json").exists():
            assert time.monotonic() < deadline and not rc_file.exists(), tmux(socket, "capture-pane", "-p")
            time.sleep(0.2)
        # another process follows it; stdout and stderr are pipes: plain lines
        watcher = subprocess.Popen([*MEDIC, "watch", "term"], env={**env, "COLUMNS": "60"}, cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        during_load: list[str] = []
        screens: list[str] = []
        while not rc_file.exists():
            assert time.monotonic() < deadline, "the lab session did not end"
            screen = tmux(socket, "capture-pane", "-p")
            screens.append(screen)
            if PANEL_DURING_LOAD.search(screen):
                during_load.append(screen)
            time.sleep(0.3)
        final = tmux(socket, "capture-pane", "-p")
        watched, _ = watcher.communicate(timeout=120)
    finally:
        tmux(socket, "kill-server")
        # the server's socket file outlives it: leave nothing behind
        (Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / socket).unlink(missing_ok=True)
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert rc_file.read_text().strip() == "0", final
    assert during_load, "no screen showed launch 1 loading with an ETA:\n" + screens[-1]
    # the panel sits below the events, in its box; the events scroll above it, with short paths
    boxed = [screen for screen in during_load if bottom_box(screen)]
    assert boxed, during_load[-1]
    assert "launch 1 (target) <workdir>/.medic/" in boxed[-1]
    assert "site-packages" not in "".join(screens)

    # the pipe: `medic watch` ended with medic run's exit code, and wrote plain whole lines
    assert watcher.returncode == 0, watched.decode()
    text = watched.decode()
    assert "\x1b" not in text and "\r" not in text, "a control code in piped output"
    lines = text.splitlines()
    faults = [line for line in lines if line.startswith("fault [")]
    assert len(faults) == 8 and all(" at " in line and len(line) > 60 for line in faults), faults
    assert any(line.startswith("launch 1 (target) <workdir>/") for line in lines)
    assert lines[-1].startswith("term: ended — verified by `python ")

    status = subprocess.run([*MEDIC, "status", "term", "--json"], env=env, capture_output=True, text=True,
                            timeout=60)
    found = json.loads(status.stdout)
    assert (found["state"], found["outcome"], found["exit_code"]) == ("ended", "verified", 0)
    assert any(line.startswith("launch 1 of 12 (target)") for line in found["panel"])

    # --notify: once, for the end, with the session, the event and a one-line summary; no job secret
    calls = sorted(tmp_path.glob("notified.*"))
    assert [p.name.split(".")[1] for p in calls] == ["ended"], calls
    told = dict(line.split("=", 1) for line in calls[0].read_text().splitlines() if "=" in line)
    assert (told["MEDIC_SESSION"], told["MEDIC_EVENT"], told["MEDIC_OUTCOME"], told["MEDIC_EXIT_CODE"]) == (
        "term", "ended", "verified", "0")
    assert told["MEDIC_SUMMARY"].startswith("term: verified — verified by `python ")
    assert "hunter2" not in calls[0].read_text()
    recorded = [json.loads(line) for line in (traces / "term.jsonl").read_text().splitlines()[1:]]
    assert [e["data"]["event"] for e in recorded if e["kind"] == "notify"] == ["ended"]

    # the session itself: the lab's cascade with the scan, as `medic run --lab` meets it, and a verified output
    assert_the_cascade(recorded, (home / "sessions" / "term" / "report.md").read_text(), "scan")
    check = subprocess.run([*MEDIC, "lab", "check", str(private_lab.output), "--path", str(private_lab.root)],
                           env=env, capture_output=True, text=True, timeout=600)
    assert check.returncode == 0 and "VERIFIED" in check.stdout, check.stdout + check.stderr
