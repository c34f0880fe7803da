"""A job Slurm requeues while it runs (``scontrol requeue``, on the real one-node cluster): medic follows the same
job through it (PENDING with Reason=BeginTime, then RUNNING again) and the requeue costs no fault, no resubmit and
no launch: the one launch ends when the job's second run does, and its output is verified."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from agent.scheduler import SlurmSettings
from agent.session import run_session
from tests.fixtures_fake import Fake, MakeFake
from tests.fixtures_slurm import start_requeued_job_now

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def log_text(fake: Fake) -> str:
    return "".join(p.read_text(errors="replace") for p in fake.host_dir.glob("runs/L1/*/log"))


def test_a_requeued_job_is_followed_through_and_is_no_fault(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", slurm=SlurmSettings())
    # writes the right output after 4 s; says which run of the job it is (Slurm counts restarts)
    command = ["sh", "-c", 'n=${SLURM_RESTART_COUNT:-0}; echo "run $n started"; sleep 4; printf 1:a > out.txt; '
                           'echo "run $n done"']
    config = fake.config.model_copy(update={"target": fake.config.target.model_copy(update={"command": command})})
    requeued = threading.Event()

    def requeue() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "run 0 started" not in log_text(fake):
            time.sleep(0.1)
        job_id = Path(next(fake.host_dir.glob("runs/L1/*/jobid"))).read_text().strip()
        subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True)
        requeued.set()
        while time.monotonic() < deadline and not any(  # medic saw it wait; then no need to wait cred_expire
                e["kind"] == "scheduler" and e["data"].get("reason") == "BeginTime" for e in fake.trace):
            time.sleep(0.2)
        while time.monotonic() < deadline and "DUE TO JOB REQUEUE" not in log_text(fake):  # slurmd's kill
            time.sleep(0.1)
        start_requeued_job_now(job_id, killed_at=time.time())

    kicker = threading.Thread(target=requeue, daemon=True)
    kicker.start()
    outcome, values = run_session(config)
    kicker.join(timeout=90)
    assert requeued.is_set()
    assert outcome == "verified", values.get("outcome_detail")
    (launch,) = values["launches"]  # the requeue cost no launch
    assert launch["outcome"] == "exited" and launch["shard_states"] == {} and launch.get("exit_code") == 0
    said = [(e["state"], e["reason"]) for e in fake.events("scheduler")]
    assert ("PENDING", "BeginTime") in said and ("REQUEUED", "restart 1") in said
    assert not fake.events("fault") and not fake.events("resubmit")
    text = log_text(fake)
    # the same job, run twice: the first TERMed by the requeue (its shell may still get to its last line)
    assert "run 0 started" in text and "DUE TO JOB REQUEUE" in text and text.endswith("run 1 done\n")
    state = subprocess.run(["scontrol", "show", "job", "-o", launch["job_id"]], capture_output=True, text=True).stdout
    assert "JobState=COMPLETED" in state and "Restarts=1" in state
