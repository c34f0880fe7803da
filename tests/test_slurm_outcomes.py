"""How Slurm's ends of a job are sorted (no cluster needed): the job's own failure first, then Slurm's
deterministic ends (diagnose), then transient ones (resubmitted without a patch); and the CLI's bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.graph import after_watch
from agent.launchers.slurm import classify, scheduler_fault
from agent.state import SessionState
from tests.fixtures_fake import medic_cli
from tools.slurm import TaskState


def ended(*states: str) -> list[TaskState]:
    return [TaskState(k, s, exit_code=1 if s == "FAILED" else 0) for k, s in enumerate(states)]


@pytest.mark.parametrize(("states", "outcome", "shard", "route"), [
    (("COMPLETED", "COMPLETED"), "exited", None, "validate"),
    (("COMPLETED", "NODE_FAIL"), "scheduler:NODE_FAIL", 1, "resubmit"),
    (("PREEMPTED",), "scheduler:PREEMPTED", 0, "resubmit"),
    (("NODE_FAIL", "TIMEOUT"), "scheduler:TIMEOUT", 1, "diagnose"),  # a limit would hit the resubmit too
    (("OUT_OF_MEMORY", "FAILED"), "crashed", 1, "diagnose"),  # the traceback of the job's own failure first
    (("CANCELLED", "COMPLETED"), "scheduler:CANCELLED", 0, "diagnose"),  # someone else's scancel
])
def test_ends_are_sorted_and_routed(states: tuple[str, ...], outcome: str, shard: int | None, route: str) -> None:
    got, task = classify(ended(*states))
    assert (got, task.shard if task else None) == (outcome, shard)
    state: SessionState = {"run": {"outcome": got}}
    assert after_watch(state) == route


def test_a_scheduler_fault_says_what_slurm_did_and_what_would_change_it() -> None:
    fault = scheduler_fault({"job_id": "42", "scheduler_state": "OUT_OF_MEMORY", "failed_shard": 3}, "log tail")
    assert fault.summary.startswith("SlurmJobEnded: OUT_OF_MEMORY: job 42 (shard 3)")
    assert "--mem" in fault.message and fault.frames == () and fault.fingerprint == "slurm:OUT_OF_MEMORY:"


@pytest.mark.parametrize(("args", "said"), [
    (["--partition", "debug"], "--partition and --sbatch-arg need --scheduler slurm"),
    (["--shards", "0"], "--shards is a count of shards (1 or more), not 0"),
    (["--shards", "2", "--server", "serve {port}"], "--shards does not go with --server (one server, one client)"),
    (["--scheduler", "slurm", "--shards", "0"], "--shards is a count of shards (1 or more), not 0"),
])
def test_bad_scheduler_options_are_one_line_and_leave_nothing(args: list[str], said: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = medic_cli("run", "--session", "bad", "--python", "/usr/bin/python3", "--workdir", str(tmp_path),
                     "--traces", str(tmp_path / "traces"), *args, "--", "true", env={"MEDIC_HOME": str(home)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(said), done.stderr
    assert not home.exists() and not (tmp_path / "traces").exists() and not (tmp_path / ".medic").exists()
