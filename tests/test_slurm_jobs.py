"""tools/slurm.py against the real one-node Slurm on 127.0.0.1: submit, follow, cancel, arrays, and reading a job
back from its folder or its name (what a restarted medic does). On this machine and over SSH (the test sshd on
loopback, as a login node would be): the same commands through the Host seam."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.fixtures_slurm import start_requeued_job_now
from tools import ipc_dir, slurm
from tools.host import CommandResult, FunctionHost, Host, LocalHost

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def wait_ended(host: Host, job: slurm.SlurmJob, timeout: float = 60.0) -> dict[int | None, slurm.TaskState]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = slurm.states(host, job)
        if not any(s.active for s in found.values()):
            return found
        time.sleep(0.3)
    raise AssertionError(f"job {job.job_id} still active after {timeout}s: {found}")


def test_submit_follow_and_cancel_a_running_job(host: Host, tmp_path: Path) -> None:
    script = "echo start $GREETING; pwd; i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.2; done"
    name = f"medic-test-follow-{tmp_path.name}-{time.time_ns()}"
    job = slurm.submit(host, ["sh", "-c", script], run_dir=str(tmp_path / "runs"), job_name=name,
                       cwd=str(tmp_path), env={"GREETING": "hello"})
    try:
        assert slurm.find_by_name(host, name) == job.job_id
        assert slurm.job_in_dir(host, job.dir) == job  # what a restarted medic reads back
        offset, text = 0, ""
        deadline = time.monotonic() + 60
        while "tick 3" not in text and time.monotonic() < deadline:
            chunk = slurm.follow(host, job, offset)
            offset, text = chunk.offset, text + chunk.data.decode()
            time.sleep(0.2)
        assert text.startswith(f"start hello\n{tmp_path}\n"), text
        assert slurm.states(host, job)[None].state == "RUNNING"
    finally:
        slurm.cancel(host, job)
    final = slurm.states(host, job)[None]
    assert final.state == "CANCELLED" and not final.active
    exit_file = Path(job.dir) / "exit"  # the wrapper may write the TERMed command's code before its own TERM
    assert not exit_file.exists() or exit_file.read_text() == "143\n"


def test_an_array_runs_each_shard_with_its_index_and_says_which_failed(host: Host, tmp_path: Path) -> None:
    script = "echo shard=$MEDIC_SHARD of $MEDIC_SHARDS arg={shard}; [ {shard} = 2 ] && exit 3; exit 0"
    job = slurm.submit(host, ["sh", "-c", script], run_dir=str(tmp_path / "runs"), job_name="medic-test-array",
                       shards=[0, 2, 3])
    final = wait_ended(host, job)
    assert {k: (s.state, s.exit_code) for k, s in final.items()} == {
        0: ("COMPLETED", 0), 2: ("FAILED", 3), 3: ("COMPLETED", 0)}
    assert slurm.follow(host, job, 0, shard=2).data == b"shard=2 of 3 arg=2\n"
    assert (Path(job.dir) / "exit.3").read_text() == "0\n"


def test_a_pending_array_line_is_one_state_per_task_and_sacct_lines_map_to_shards() -> None:
    line = "JobId=7 ArrayJobId=7 ArrayTaskId=1-3,5%2 JobName=x JobState=PENDING Reason=Resources ExitCode=0:0"
    assert [(s.shard, s.state, s.reason) for s in slurm.parse_scontrol(line)] == [
        (1, "PENDING", "Resources"), (2, "PENDING", "Resources"), (3, "PENDING", "Resources"),
        (5, "PENDING", "Resources")]
    text = "7_1|PENDING|0:0|\n7_1|NODE_FAIL|0:0|\n7_2|CANCELLED by 0|0:15|\n8|COMPLETED|0:0|\n"
    assert [(s.shard, s.state, s.signal) for s in slurm.parse_sacct(text, "7")] == [
        (1, "NODE_FAIL", 0), (2, "CANCELLED", 15)]


def test_sbatch_refusing_a_job_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(slurm.RunError, match="sbatch refused the job"):
        slurm.submit(LocalHost(), ["true"], run_dir=str(tmp_path), job_name="medic-test-bad",
                     partition="no-such-partition")


def test_each_task_binds_its_sockets_in_a_folder_of_its_own_gone_with_the_job(host: Host, tmp_path: Path) -> None:
    """A task that ends, and one scancel ends, each leave nothing in the temp dir (tools/ipc_dir.py)."""
    from tests.test_ipc_dir import BIND, VAR

    job = slurm.submit(host, [sys.executable, "-c", BIND, "{shard}"], run_dir=str(tmp_path / "runs"),
                       job_name="medic-test-ipc", shards=[0, 120], ipc_vars=[VAR])
    sockets: dict[int, Path] = {}
    deadline = time.monotonic() + 60
    while len(sockets) < 2 and time.monotonic() < deadline:
        for shard in (0, 120):
            said = slurm.follow(host, job, 0, shard=shard).data.decode().split()
            if said:
                sockets[shard] = Path(said[0])
        time.sleep(0.2)
    slurm.cancel(host, job, shards=[120])
    wait_ended(host, job)
    slurm.drop_ipc(host, job)
    assert {s.parent.parent for s in sockets.values()} == {Path(tempfile.gettempdir())}, sockets
    assert all(s.parent.name.startswith(ipc_dir.PREFIX) for s in sockets.values()), sockets
    assert not [s.parent for s in sockets.values() if s.parent.exists()], "a task's folder outlived the job"


def test_a_requeued_jobs_earlier_exit_code_is_gone_once_it_runs_again(host: Host, tmp_path: Path) -> None:
    name = f"medic-test-requeue-{tmp_path.name}-{time.time_ns()}"
    script = 'echo "run ${SLURM_RESTART_COUNT:-0}"; sleep 3'
    job = slurm.submit(host, ["sh", "-c", script], run_dir=str(tmp_path / "runs"), job_name=name, cwd=str(tmp_path))
    exit_file = Path(job.dir) / "exit"
    try:
        deadline = time.monotonic() + 60
        while b"run 0" not in slurm.follow(host, job, 0).data and time.monotonic() < deadline:
            time.sleep(0.1)
        subprocess.run(["scontrol", "requeue", job.job_id], check=True, capture_output=True)
        while not exit_file.exists() and time.monotonic() < deadline:  # the TERMed run wrote its code
            time.sleep(0.1)
        assert exit_file.read_text() == "143\n"
        start_requeued_job_now(job.job_id, killed_at=time.time())
        while b"run 1" not in slurm.follow(host, job, 0).data and time.monotonic() < deadline:
            time.sleep(0.1)
        assert b"run 1" in slurm.follow(host, job, 0).data, slurm.states(host, job)
        assert slurm.states(host, job)[None].state == "RUNNING"
        assert not exit_file.exists()  # the run that goes on has not ended: no code says it has
        assert wait_ended(host, job)[None].state == "COMPLETED"
        assert exit_file.read_text() == "0\n"
    finally:
        slurm.cancel(host, job)


def test_a_controller_that_does_not_answer_ends_nothing() -> None:
    """A requeued job's earlier run left exit 143; while slurmctld is unheard that file says nothing of the job."""
    job = slurm.SlurmJob("17", "/runs/j")
    unheard = FunctionHost(lambda line: CommandResult(
        1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", 0.0),
        files={"/runs/j/exit": b"143\n"})
    found = slurm.states(unheard, job)[None]
    assert found.state == slurm.UNANSWERED and found.active and "Unable to contact" in found.reason
    forgotten = FunctionHost(lambda line: CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified", 0.0)
                             if line.startswith("scontrol") else (1, ""), files={"/runs/j/exit": b"143\n"})
    assert slurm.states(forgotten, job)[None] == slurm.TaskState(None, "FAILED", "", 143)
