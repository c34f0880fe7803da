"""A real one-node Slurm cluster on 127.0.0.1 for the tests (lab/slurm_up.sh): the one `make test` started, or
one this fixture starts and stops again (a single test file run by hand). Never skipped: a cluster that does not
come up fails the tests with the script's own message."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parent.parent / "lab"


def cluster_up() -> bool:
    try:
        answer = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    # "completing": a job just ended or was requeued; a worker that read it as "down" would own the cluster and
    # stop it under the other worker's jobs at its session's end
    return answer.returncode == 0 and answer.stdout.strip() in ("idle", "mixed", "allocated", "completing")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    started = not cluster_up()
    if started:
        up = subprocess.run([str(LAB / "slurm_up.sh")], capture_output=True, text=True, timeout=600)
        if up.returncode != 0:
            pytest.fail(f"the Slurm cluster did not start: {up.stderr.strip()[-2000:]}", pytrace=False)
    yield
    if started:
        subprocess.run([str(LAB / "slurm_down.sh")], capture_output=True, timeout=120)


def start_requeued_job_now(job_id: str, killed_at: float) -> None:
    """Let a requeued job start without waiting out its begin delay. slurmd refuses a job credential made in the
    second it revoked the job's last one (``cred->ctime <= revoked``: "Job credential revoked", and the job ends
    FAILED), the reason slurmctld delays a requeued job by cred_expire; so the start is moved only once the clock
    is past the second in which the kill was seen (``killed_at``, the earlier run's exit code or Slurm's line)."""
    time.sleep(max(0.0, math.floor(killed_at) + 1.2 - time.time()))
    # not checked: a job that started meanwhile is refused, and is where the caller wants it
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)
