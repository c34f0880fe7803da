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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.cli.run import lab_target
from agent.config import SessionConfig
from agent.launchers.slurm import job_name as launch_name
from agent.launchers.slurm import submitted_before
from agent.readers.postmortem import postmortem_markdown
from agent.readers.replay import replay
from agent.readers.tracefile import read_trace
from agent.scheduler import SlurmSettings
from agent.session import make_deps, run_session
from lab.build import LabPaths
from tests.fixtures_fake import CHECK, Fake, MakeFake, build_fake, medic_cli, spawn_medic
from tests.fixtures_lab import cache_config_hidden_from_the_scan
from tests.fixtures_slurm import cluster_up
from tools import slurm

pytestmark = pytest.mark.usefixtures("slurm_cluster")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    return tmp_path


def jobs_named(name: str) -> list[str]:
    """Every job slurmctld knows by this name, in any state: a launch submitted twice would show two."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%F"], capture_output=True, text=True,
                         check=True).stdout
    return sorted(set(out.split()))


def job_name(fake: Fake, n: int) -> str:
    return f"medic-{fake.config.session_id}-{fake.config.instance}-L{n}"


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
        for _ in range(100):  # the node serves the next tests again
            if cluster_up():
                break
            time.sleep(0.2)
    assert failed.is_set()
    outcomes = [launch["outcome"] for launch in values["launches"]]
    assert outcomes[0] == "scheduler:NODE_FAIL"
    assert outcome == "verified", values.get("outcome_detail")
    kinds = [e["kind"] for e in fake.trace]
    first_launch2 = [i for i, e in enumerate(fake.trace) if e["kind"] == "launch"][1]
    assert "resubmit" in kinds[:first_launch2] and "applied" not in kinds[:first_launch2]
    assert "fault" not in kinds[:first_launch2]  # nothing to diagnose: the scheduler's fault, not the job's
    assert values["resubmits"] == 1 and len(values["patches"]) == 1
    assert replay(fake.trace_path).first_divergence is None


@pytest.mark.usefixtures("time_limited_session")
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
        ran = (last / f"command.{shard}.sh").read_text().splitlines()[0]  # then the exit-127 note (env_scripts)
        assert ran.rstrip().endswith(f"driver.py --shard {shard}"), ran
        assert (last / f"exit.{shard}").read_text() == "0\n"
    assert all(len(jobs_named(job_name(fake, n))) == 1 for n in (1, 2, 3))
    assert replay(fake.trace_path).first_divergence is None  # today's routers re-decide the shard passes
    assert "| 0 | 2 | yes |" in postmortem_markdown(read_trace(fake.trace_path))  # shard 0: two launches


def read_logs(fake: Fake) -> str:
    return "".join(p.read_text(errors="replace") for p in fake.host_dir.glob("runs/L*/*/log"))


@pytest.mark.usefixtures("time_limited_session")
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


@pytest.mark.usefixtures("time_limited_session")
def test_medic_sigkilled_while_its_shards_are_queued_resumes_onto_the_same_job(make_fake: MakeFake) -> None:
    """Three shards wait in the queue (a dependency on a job that is still running) when medic is SIGKILLed; they
    start without it; `medic resume` follows that same array (never a second submit), repairs once, runs all three
    again and verifies them."""
    blocker = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 5"], capture_output=True,
                             text=True, check=True).stdout.strip()
    fake = make_fake(mode="unattended", seconds=2.0, slurm=SlurmSettings(
        shards=3, lead_shard=False, sbatch_args=[f"--dependency=afterany:{blocker}"]))
    proc = spawn_medic("resume", fake.config.session_id)
    deadline = time.monotonic() + 60
    while not fake.launch_ledger() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    first = jobs_named(job_name(fake, 1))
    queued = subprocess.run(["squeue", "-h", "-r", "-j", first[0], "-o", "%T"], capture_output=True, text=True)
    assert queued.stdout.split() == ["PENDING"] * 3, queued.stdout  # queued, and medic is gone
    done = medic_cli("resume", fake.config.session_id, timeout=180)
    assert done.returncode == 0, done.stderr
    assert jobs_named(job_name(fake, 1)) == first  # reattached: L1 was never submitted again
    ledger = fake.launch_ledger()
    assert ledger[0]["job_id"] == first[0] and [line["shards"] for line in ledger] == [[0, 1, 2], [0, 1, 2]]
    assert len(list(fake.host_dir.glob("runs/L1/*/jobid"))) == 1
    assert fake.events("exit")[-1]["outcome"] == "verified" and len(fake.events("applied")) == 1


@pytest.mark.usefixtures("time_limited_session")
@pytest.mark.lab
def test_a_lab_session_under_slurm_repairs_the_run_fault_and_resubmits(private_lab: LabPaths, home: Path) -> None:
    """The embedded lab (pristine speculators × vLLM 0.16.0) as Slurm jobs: the scan's faults are patched before the
    first submit, the one only a run shows (#6, its CacheConfig built through **kwargs the scan cannot read) crashes
    job 1, is repaired, and job 2's output is verified."""
    cache_config_hidden_from_the_scan(private_lab)
    config = SessionConfig(session_id="lab-slurm", target=lab_target(private_lab.root), mode="unattended",
                           traces_dir=str(home / "traces"), slurm=SlurmSettings())
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    launches = values["launches"]
    assert [launch["outcome"] for launch in launches] == ["crashed", "exited"]
    assert all(launch.get("job_id") for launch in launches)
    assert values["faults"][-1]["launch"] == 1 and values["faults"][-1]["stage"] == "crash"
    assert jobs_named(f"medic-lab-slurm-{config.instance}-L2") == [launches[1]["job_id"]]


@dataclass
class Background:
    proc: subprocess.Popen[str]
    traces: Path


@pytest.fixture(scope="module")
def time_limited_session(tmp_path_factory: pytest.TempPathFactory, slurm_cluster: None) -> Iterator[Background]:
    """A `medic run` whose job hits a one-minute time limit, started by the first test after the node failure one
    (that one takes the node down, which would end this job too): Slurm's limits are whole minutes (and it looks
    every 30 s), so it waits in the background while the other tests run, not after them."""
    root = tmp_path_factory.mktemp("time-limit")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEDIC_HOME", str(root / "home"))
        fake = build_fake(root, mode="unattended", seconds=300.0, save=False, session_id="tl")
        t = fake.config.target
        (fake.work / "check.py").write_text(CHECK)
        proc = spawn_medic("run", "--session", "tl", "--python", t.python, "--workdir", t.workdir, "--no-scan",
                           "--traces", fake.config.traces_dir, "--validate", "python check.py", "--scheduler", "slurm",
                           "--partition", "debug", "--sbatch-arg=--time=1", "--", *t.command,
                           env={"MEDIC_HOME": str(root / "home")})
    yield Background(proc, Path(fake.config.traces_dir))
    if proc.poll() is None:  # its test did not run (a -k selection): neither medic nor its job outlives the module
        proc.kill()
        proc.wait(timeout=30)
        listed = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True).stdout.split("\n")
        mine = [line.split()[0] for line in listed if " medic-tl-" in f" {line.partition(' ')[2]}"]
        if mine:
            subprocess.run(["scancel", *mine], check=False)


def test_the_cli_runs_on_slurm_and_a_time_limit_is_a_fault_of_its_own(time_limited_session: Background) -> None:
    """--sbatch-arg passes through (a one-minute limit); Slurm's TIMEOUT ends the job; diagnose calls it what it is
    and no patch is tried for it: exit 4 with the reason."""
    out, err = time_limited_session.proc.communicate(timeout=240)
    assert time_limited_session.proc.returncode == 4, err[-2000:]
    trace = [json.loads(line) for line in (time_limited_session.traces / "tl.jsonl").read_text().splitlines()[1:]]
    launches = [e["data"] for e in trace if e["kind"] == "launch"]
    assert len(launches) == 1 and launches[0]["job_name"].startswith("medic-tl-")
    faults = [e["data"] for e in trace if e["kind"] == "fault"]
    assert faults and faults[0]["summary"].startswith("SlurmJobEnded: TIMEOUT")
    assert "applied" not in [e["kind"] for e in trace]
    assert "TIMEOUT" in err + out


def test_a_submit_whose_answer_was_lost_is_found_by_its_folder_or_its_name(make_fake: MakeFake) -> None:
    """medic killed between sbatch and its ledger line (or even before the jobid file): the launch finds the job."""
    fake = make_fake(slurm=SlurmSettings())
    deps = make_deps(fake.config)
    base, ledger = f"{fake.config.host_dir}/runs/L1", f"{fake.config.host_dir}/launches/L1.json"
    job = slurm.submit(deps.host, ["sleep", "30"], run_dir=base, job_name=launch_name(deps.config, 1))
    try:
        assert submitted_before(deps.host, base, ledger, launch_name(deps.config, 1)) == job  # its folder's jobid
        Path(job.dir, "jobid").unlink()
        assert submitted_before(deps.host, base, ledger, launch_name(deps.config, 1)) == job  # its name in squeue
    finally:
        slurm.cancel(deps.host, job)
        deps.trace.close()


def test_only_the_shard_that_did_not_finish_runs_again(make_fake: MakeFake) -> None:
    """All shards at once (--no-lead-shard); only shard 1 reaches the drifted call (its data, say), the others finish.
    medic repairs shard 1's fault once and resubmits shard 1 alone: the finished shards are checked, not rerun."""
    fake = make_fake(mode="unattended", slurm=SlurmSettings(shards=3, lead_shard=False))
    command = ["sh", "-c", f'[ "$MEDIC_SHARD" = 1 ] && exec {fake.python} driver.py; printf 1:a > out.txt']
    config = fake.config.model_copy(update={"target": fake.config.target.model_copy(update={"command": command})})
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    ran = [(launch["outcome"], launch["shards"]) for launch in values["launches"]]
    assert ran == [("crashed", [0, 1, 2]), ("exited", [1])]
    assert values["launches"][0]["failed_shard"] == 1 and len(values["patches"]) == 1
    before = [(e["shard"], e["verified"]) for e in fake.events("shard") if e.get("before_launch")]
    assert before == [(0, True), (2, True)]  # checked before the relaunch, so never run again
    assert replay(fake.trace_path).first_divergence is None


@pytest.mark.ssh
def test_a_whole_session_on_a_login_node_over_ssh(sshd, make_fake: MakeFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """medic on one machine, Slurm's client commands on a login node it reaches over real SSH (sshd on
    127.0.0.1): sbatch, squeue/sacct and the job's output file all go through paramiko; the fault is repaired
    once and the resubmitted job verifies; one job per launch, as the cluster itself says."""
    monkeypatch.setenv("MEDIC_SSH_CONFIG", sshd.config_path)
    fake = make_fake(mode="unattended", host=sshd.alias, slurm=SlurmSettings())
    outcome, values = run_session(fake.config)
    assert outcome == "verified", values.get("outcome_detail")
    header = json.loads(fake.trace_path.read_text().splitlines()[0])
    assert header["host"] != "local"
    assert [launch["outcome"] for launch in values["launches"]] == ["crashed", "exited"]
    assert all(launch["launcher"] == "slurm" and launch["job_id"] for launch in values["launches"])
    assert all(len(jobs_named(job_name(fake, n))) == 1 for n in (1, 2))
    assert len(values["patches"]) == 1
    assert replay(fake.trace_path).first_divergence is None


def test_a_preempted_job_is_resubmitted_without_a_patch(make_fake: MakeFake) -> None:
    """A job in the higher-tier partition needs the whole node while medic's job holds it: Slurm cancels medic's
    job as PREEMPTED (lab/slurm_up.sh: partition_prio, PreemptMode=CANCEL). medic submits the same job again
    once the node is free, no diagnose, no patch; the code fault after it is repaired as usual. Last in this
    module: the urgent job would preempt any job of the debug partition, the background time-limit one too."""
    deadline = time.monotonic() + 180
    while subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "the cluster never emptied"
        time.sleep(1)
    # long enough that the preemption lands before the job reaches its fault, on a loaded machine too
    fake = make_fake(mode="unattended", seconds=10.0,
                     slurm=SlurmSettings(sbatch_args=["--exclusive"], resubmit_backoff=0.5))
    urgent: list[str] = []

    def preempt() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "line 000003" not in read_logs(fake):
            time.sleep(0.2)
        out = subprocess.run(["sbatch", "--parsable", "-p", "urgent", "--exclusive", "-o", "/dev/null",
                              "--wrap", "sleep 1"], capture_output=True, text=True, check=True)
        urgent.append(out.stdout.strip())

    thread = threading.Thread(target=preempt, daemon=True)
    thread.start()
    try:
        outcome, values = run_session(fake.config)
    finally:
        thread.join(timeout=90)
    assert urgent
    assert values["launches"][0]["outcome"] == "scheduler:PREEMPTED"
    assert outcome == "verified", values.get("outcome_detail")
    kinds = [e["kind"] for e in fake.trace]
    first_launch2 = [i for i, e in enumerate(fake.trace) if e["kind"] == "launch"][1]
    assert "resubmit" in kinds[:first_launch2] and "fault" not in kinds[:first_launch2]
    assert values["resubmits"] == 1 and len(values["patches"]) == 1
    assert replay(fake.trace_path).first_divergence is None
