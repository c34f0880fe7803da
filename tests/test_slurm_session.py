"""Sessions whose launches are Slurm jobs on the real one-node cluster (lab/slurm_up.sh): a fault repaired once for
all shards, a node failure resubmitted without a patch, a time limit and a job that can never start told apart
from code faults, and medic SIGKILLed while its job runs, resumed onto the same job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agent.scheduler import SlurmSettings
from agent.session import run_session
from tests.fixtures_fake import CHECK, Fake, MakeFake, medic_cli, spawn_medic

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def jobs_named(name: str) -> list[str]:
    """Every job slurmctld knows by this name, in any state: a launch submitted twice would show two."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%F"], capture_output=True, text=True,
                         check=True).stdout
    return sorted(set(out.split()))


def job_name(fake: Fake, n: int) -> str:
    return f"medic-{fake.config.session_id}-{fake.config.instance}-L{n}"


def test_one_repair_for_all_shards_and_a_verified_shard_never_runs_again(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", args=["--shard", "{shard}"], slurm=SlurmSettings(shards=4))
    outcome, values = run_session(fake.config)
    assert outcome == "verified", values.get("outcome_detail")
    assert len(values["patches"]) == 1  # the drift, repaired once, not once per shard
    ran = [(launch["outcome"], launch["shards"]) for launch in values["launches"]]
    # the lead shard finds the fault alone, is verified once patched, then only the other three run
    assert ran == [("crashed", [0]), ("exited", [0]), ("exited", [1, 2, 3])]
    assert values["verified_shards"] == [0, 1, 2, 3]
    assert [e["shard"] for e in fake.events("shard") if e["verified"]] == [0, 1, 2, 3]
    last = Path(values["launches"][-1]["run_dir"])
    for shard in (1, 2, 3):  # each shard's command got its own index; its log is its own
        assert (last / f"command.{shard}.sh").read_text().rstrip().endswith(f"driver.py --shard {shard}")
        assert (last / f"exit.{shard}").read_text() == "0\n"
    assert all(len(jobs_named(job_name(fake, n))) == 1 for n in (1, 2, 3))


def test_a_node_failure_is_resubmitted_without_a_patch(make_fake: MakeFake) -> None:
    """The node goes DOWN under a running job (--no-requeue, so Slurm ends it NODE_FAIL instead of requeueing it
    itself): medic submits the same job again, no diagnose, no patch; the code fault after it is repaired."""
    fake = make_fake(mode="unattended", seconds=3.0,
                     slurm=SlurmSettings(sbatch_args=["--no-requeue"], resubmit_backoff=0.5))
    failed = threading.Event()

    def fail_the_node() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "line 000003" not in read_logs(fake):
            time.sleep(0.2)
        subprocess.run(["scontrol", "update", "NodeName=localhost", "State=DOWN", "Reason=medic-test"], check=True)
        time.sleep(1.0)
        subprocess.run(["scontrol", "update", "NodeName=localhost", "State=RESUME"], capture_output=True)
        failed.set()

    killer = threading.Thread(target=fail_the_node, daemon=True)
    killer.start()
    try:
        outcome, values = run_session(fake.config)
    finally:
        killer.join(timeout=90)
        subprocess.run(["scontrol", "update", "NodeName=localhost", "State=RESUME"], capture_output=True)
    assert failed.is_set()
    outcomes = [launch["outcome"] for launch in values["launches"]]
    assert outcomes[0] == "scheduler:NODE_FAIL"
    assert outcome == "verified", values.get("outcome_detail")
    kinds = [e["kind"] for e in fake.trace]
    first_launch2 = [i for i, e in enumerate(fake.trace) if e["kind"] == "launch"][1]
    assert "resubmit" in kinds[:first_launch2] and "applied" not in kinds[:first_launch2]
    assert "fault" not in kinds[:first_launch2]  # nothing to diagnose: the scheduler's fault, not the job's
    assert values["resubmits"] == 1 and len(values["patches"]) == 1


def read_logs(fake: Fake) -> str:
    return "".join(p.read_text(errors="replace") for p in fake.host_dir.glob("runs/L*/*/log"))


def test_a_job_that_can_never_start_is_a_scheduler_fault_not_a_wait(make_fake: MakeFake, tmp_path: Path) -> None:
    failed = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "exit 1"], capture_output=True,
                            text=True, check=True).stdout.strip()
    fake = make_fake(mode="unattended", slurm=SlurmSettings(sbatch_args=[f"--dependency=afterok:{failed}"]))
    started = time.monotonic()
    outcome, values = run_session(fake.config)
    assert time.monotonic() - started < 60
    assert outcome == "no_repair"
    assert values["launches"][0]["outcome"] == "scheduler:PENDING"
    fault = values["faults"][-1]
    assert fault["exc_type"] == "SlurmJobEnded" and "DependencyNeverSatisfied" in fault["message"]
    assert jobs_named(job_name(fake, 1)) and all(  # cancelled, not left queued
        s == "CANCELLED" for s in subprocess.run(["squeue", "-h", "-t", "all", "-n", job_name(fake, 1), "-o", "%T"],
                                                 capture_output=True, text=True).stdout.split())


def test_medic_sigkilled_while_its_job_runs_resumes_onto_the_same_job(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", seconds=4.0, slurm=SlurmSettings())
    proc = spawn_medic("resume", fake.config.session_id)
    deadline = time.monotonic() + 60
    while "line 000002" not in read_logs(fake) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    first = jobs_named(job_name(fake, 1))
    state = subprocess.run(["squeue", "-h", "-j", first[0], "-o", "%T"], capture_output=True, text=True).stdout
    assert state.strip() in ("PENDING", "RUNNING"), state  # the job goes on without medic
    done = medic_cli("resume", fake.config.session_id, timeout=180)
    assert done.returncode == 0, done.stderr
    assert jobs_named(job_name(fake, 1)) == first  # reattached: L1 was never submitted again
    ledger = fake.launch_ledger()
    assert ledger[0]["job_id"] == first[0] and len(ledger) == 2
    assert len(list(fake.host_dir.glob("runs/L1/*/jobid"))) == 1
    assert fake.events("exit")[-1]["outcome"] == "verified"


def test_the_cli_runs_on_slurm_and_a_time_limit_is_a_fault_of_its_own(make_fake: MakeFake) -> None:
    """--sbatch-arg passes through (a one-minute limit); Slurm's TIMEOUT ends the job; diagnose calls it what it is
    and no patch is tried for it: exit 4 with the reason. (Slurm's limits are whole minutes: ~65 s.)"""
    fake = make_fake(mode="unattended", seconds=300.0, save=False, session_id="tl")
    t = fake.config.target
    (fake.work / "check.py").write_text(CHECK)
    done = medic_cli("run", "--session", "tl", "--python", t.python, "--workdir", t.workdir, "--no-scan",
                     "--traces", fake.config.traces_dir, "--validate", "python check.py", "--scheduler", "slurm",
                     "--sbatch-arg=--time=1", "--", *t.command, timeout=240)
    assert done.returncode == 4, done.stderr[-2000:]
    trace = [json.loads(line) for line in (Path(fake.config.traces_dir) / "tl.jsonl").read_text().splitlines()[1:]]
    launches = [e["data"] for e in trace if e["kind"] == "launch"]
    assert len(launches) == 1 and launches[0]["job_name"].startswith("medic-tl-")
    faults = [e["data"] for e in trace if e["kind"] == "fault"]
    assert faults and faults[0]["summary"].startswith("SlurmJobEnded: TIMEOUT")
    assert "applied" not in [e["kind"] for e in trace]
    assert "TIMEOUT" in done.stderr or "TIMEOUT" in done.stdout
