"""What a person reads after `medic resume` and after `medic revert`: the resumed session's first line says what
it found (launch, pid, still running or ended, followed), and `medic status` says the patches are gone, not only
how the session ended. The fake target (tests/fixtures_fake.py), the real CLI in fresh processes."""

from __future__ import annotations

import os
import signal
import time

from agent.readers.watch import session_status
from tests.fixtures_fake import MakeFake, medic_cli, spawn_medic


def test_resume_names_the_launch_it_found_and_status_after_revert_says_the_patches_are_gone(
        make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", seconds=4.0, session_id="rr")
    first = spawn_medic("resume", "rr")
    try:
        deadline = time.monotonic() + 120
        while "checks_queued" not in fake.kinds() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert first.poll() is None, "medic ended before its first launch was watched"
        os.kill(first.pid, signal.SIGKILL)  # medic dies; the detached job goes on
    finally:
        first.kill()
        first.wait(timeout=30)
    (run_pid,) = [int((d / "pid").read_text()) for d in fake.run_dirs()]
    done = medic_cli("resume", "rr")
    assert done.returncode == 0, done.stderr
    line = done.stderr.strip().splitlines()[0]  # the first thing a person reads: not "phase loading"
    assert line.startswith(f"resumed: found launch 1 (target) (pid {run_pid}) "), done.stderr
    assert line.endswith(("is still running: following it", "ended (exit 1) while medic was away: reading its log"))
    (patch,) = [e["patch_id"] for e in fake.events("applied")]
    assert medic_cli("revert", "rr").returncode == 0
    found = session_status("rr")  # what `medic status rr` prints after "rr: ended (verified, exit 0) — "
    assert (found.state, found.outcome) == ("ended", "verified")
    assert found.detail.startswith("REVERTED at ") and "by `medic revert`" in found.detail, found.detail
    assert f"its 1 patch(es) ({patch}) are gone" in found.detail and "Before that: verified" in found.detail
