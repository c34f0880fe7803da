"""Launches as Slurm jobs (``--scheduler slurm``): submit once per launch id, follow, and sort how the job ended.

The launch node hands a Slurm session's launches here; watch sees the job through the same handle as a detached
run's (agent/nodes/run_handle.py). A launch's ledger line holds the job id, and the job's name says which
session and launch it is, so a medic that died at any point reattaches to the same job and never submits twice.
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from agent.deps import Deps
from agent.nodes.shard_logs import explaining_shard
from agent.nodes.shard_validate import before_relaunch, nothing_left
from agent.remedies import env_edits, job_env, with_unset
from agent.repair.types import Fault
from agent.scheduler import DETERMINISTIC_STATES, NEVER_STARTS, TRANSIENT_STATES, SlurmSettings
from agent.shards import shards_for
from agent.state import LaunchRecord, SessionState
from tools import runs, slurm


def settings(deps: Deps) -> SlurmSettings:
    assert deps.config.slurm is not None
    return deps.config.slurm


def job_name(deps: Deps, n: int) -> str:
    """What ``squeue`` shows: medic, the session, its instance and the launch (unique, so a lookup by name is exact)."""
    return f"medic-{deps.config.session_id}-{deps.config.instance}-L{n}"


def launch_job(state: SessionState, deps: Deps, record: LaunchRecord, command: list[str], base: str,
               ledger: str, extra: dict[str, Any]) -> dict[str, Any]:
    n, kind, host = record["n"], record.get("kind", "target"), deps.host
    name = job_name(deps, n)
    update: dict[str, Any] = {}
    job = submitted_before(deps, base, ledger, name)
    if job is not None:  # submitted before medic died: reattach, never submit twice
        if not host.exists(ledger):
            write_ledger(deps, ledger, n, job)
        deps.record("launch", "launch", {"n": n, "kind": kind, "run_dir": job.dir, "job_id": job.job_id,
                                         "shards": list(job.shards), "reattached": True})
    else:
        config = settings(deps)
        state, update = before_relaunch(state, deps, kind)
        host.run(["mkdir", "-p", f"{deps.config.host_dir}/launches"], timeout=30)
        env, unset = job_env(host, deps.config.target.env, env_edits(state.get("patches") or []))
        shards = shards_for(state, deps.config, kind)
        nothing_left(deps, kind, shards)
        job = slurm.submit(host, with_unset(command, unset), run_dir=base, job_name=name,
                           cwd=deps.config.target.workdir, env=env, partition=config.partition,
                           sbatch_args=config.sbatch_args, shards=shards)
        write_ledger(deps, ledger, n, job)
        deps.record("launch", "launch", {"n": n, "kind": kind, "run_dir": job.dir, "command": command,
                                         "job_id": job.job_id, "job_name": name, "shards": list(job.shards),
                                         **extra})
    record["run_id"], record["run_dir"] = job.dir.rsplit("/", 1)[-1], job.dir
    record["job_id"], record["shards"] = job.job_id, list(job.shards)
    return {**update, "launches": [*(state.get("launches") or []), record], "run": record}


def write_ledger(deps: Deps, ledger: str, n: int, job: slurm.SlurmJob) -> None:
    line = {"n": n, "run": job.dir, "job_id": job.job_id, "shards": list(job.shards), "at": time.time()}
    deps.host.write_bytes_atomic(ledger, json.dumps(line).encode())


def submitted_before(deps: Deps, base: str, ledger: str, name: str) -> slurm.SlurmJob | None:
    """The job of launch ``base``: from its ledger line, else its folder's ``jobid``, else its name in squeue."""
    host = deps.host
    if host.exists(ledger):
        try:
            line = json.loads(host.read_bytes(ledger))
            return slurm.SlurmJob(str(line["job_id"]), str(line["run"]), tuple(line.get("shards") or ()))
        except (ValueError, KeyError):
            pass
    # a folder whose sbatch answered, else the newest one (killed between sbatch and writing its answer)
    found = host.run(f"ls -1d {shlex.quote(base)}/*/jobid 2>/dev/null | head -1", timeout=30).stdout.strip()
    found = found.removesuffix("/jobid") or host.run(f"ls -1d {shlex.quote(base)}/*/ 2>/dev/null | tail -1",
                                                     timeout=30).stdout.strip().rstrip("/")
    if not found:
        return None
    shards = tuple(int(p.rsplit(".", 2)[-2]) for p in host.run(
        f"ls -1 {shlex.quote(found)}/command.*.sh 2>/dev/null", timeout=30).stdout.split())
    job = slurm.job_in_dir(host, found, sorted(shards))
    if job is None and (job_id := slurm.find_by_name(host, name)):  # sbatch answered, the jobid file was lost
        job = slurm.SlurmJob(job_id, found, tuple(sorted(shards)))
    return job


class SlurmHandle:
    """watch's view of a Slurm job: the lead shard's log, the states of all, scancel."""

    def __init__(self, deps: Deps, record: LaunchRecord) -> None:
        self.deps, self.record = deps, record
        self.job = slurm.SlurmJob(record["job_id"], record["run_dir"], tuple(record.get("shards") or ()))
        self.lead = self.job.shards[0] if self.job.shards else None
        self.last: dict[int | None, slurm.TaskState] = {}
        self.reason = ""
        self.stuck = ""
        self.restarts = 0

    def follow(self, offset: int) -> runs.LogChunk:
        return slurm.follow(self.deps.host, self.job, offset, self.lead)

    def ended_hint(self) -> bool:
        return self.deps.host.exists(self.job.exit_file(self.lead))

    def status(self) -> runs.RunStatus:
        self.last = slurm.states(self.deps.host, self.job)
        restarts = max((s.restarts for s in self.last.values()), default=0)
        if restarts > self.restarts:  # Slurm requeued it (scontrol requeue, a preemption that requeues): the
            self.restarts = restarts  # same job runs again, no fault; its log goes on (--open-mode=append)
            self.deps.record("scheduler", "watch", {"job_id": self.job.job_id, "state": "REQUEUED",
                                                    "reason": f"restart {restarts}", "launch": self.record["n"]})
        pending = [s for s in self.last.values() if s.state == "PENDING"]
        reason = pending[0].reason if pending else ""
        if reason != self.reason:  # why it waits, once per change: Priority, Resources, BeginTime…
            self.reason = reason
            if reason:
                self.deps.record("scheduler", "watch", {"job_id": self.job.job_id, "state": "PENDING",
                                                        "reason": reason, "launch": self.record["n"]})
        if reason in NEVER_STARTS and len(pending) == sum(1 for s in self.last.values() if s.active):
            self.stuck = reason  # as submitted it can never start here: no use waiting for the time budget
            self.stop()
            return runs.RunStatus("exited", None)
        if any(s.active for s in self.last.values()):
            return runs.RunStatus("running")
        return runs.RunStatus("exited", self.first_failure_code())

    def first_failure_code(self) -> int | None:
        codes = [s.exit_code for s in self.last.values() if s.state != "COMPLETED"]
        return codes[0] if codes else 0

    def stop(self) -> None:
        slurm.cancel(self.deps.host, self.job)

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str:
        """How the job ended, in the record's words: ``exited``, ``crashed`` (the job's own failure: diagnose
        reads its log) or ``scheduler:<STATE>`` (Slurm ended it: transient ones are resubmitted)."""
        tasks = self.last or slurm.states(self.deps.host, self.job)
        record["shard_states"] = {str(k): s.state for k, s in tasks.items() if k is not None}
        if self.stuck:
            record["scheduler_state"], record["scheduler_reason"] = "PENDING", self.stuck
            record["failed_shard"] = self.lead
            return "scheduler:PENDING"
        outcome, task = classify(list(tasks.values()))
        failed = {t.shard: self.job.log(t.shard) for t in tasks.values() if t.state == "FAILED" and t.shard is not None}
        if outcome == "crashed" and len(failed) > 1:  # one log per shard: the one that explains it
            task = tasks[explaining_shard(self.deps, failed)]
        if task is None:
            record["exit_code"] = 0
            return outcome
        record["scheduler_state"], record["scheduler_reason"] = task.state, task.reason
        record["failed_shard"], record["exit_code"] = task.shard, task.exit_code
        return outcome


def classify(tasks: list[slurm.TaskState]) -> tuple[str, slurm.TaskState | None]:
    """The outcome of ended tasks and the task that decides it: the job's own failure first (its log has the
    traceback), then a deterministic end of Slurm's, then a transient one; all COMPLETED is ``exited``."""
    ranked = ([t for t in tasks if t.state == "FAILED"] or [t for t in tasks if t.state in DETERMINISTIC_STATES]
              or [t for t in tasks if t.state in TRANSIENT_STATES] or [t for t in tasks if t.state != "COMPLETED"])
    if not ranked:
        return "exited", None
    task = ranked[0]
    return ("crashed" if task.state == "FAILED" else f"scheduler:{task.state}"), task


def transient(record: LaunchRecord | dict[str, Any]) -> bool:
    return str(record.get("outcome") or "").removeprefix("scheduler:") in TRANSIENT_STATES and str(
        record.get("outcome") or "").startswith("scheduler:")


# What each deterministic end means to the person who reads the report, and what would change it.
WHY = {
    "TIMEOUT": "Slurm killed it at its time limit: give it more (--sbatch-arg=--time=...) or make it faster",
    "OUT_OF_MEMORY": "Slurm killed it for using more memory than it asked for: ask for more (--sbatch-arg=--mem=...)",
    "CANCELLED": "someone other than medic cancelled it (scancel, or an administrator)",
    "DEADLINE": "it passed the deadline it was submitted with (--deadline)",
    "PENDING": "it can never start as submitted",
}


def scheduler_fault(record: LaunchRecord, log_tail: str) -> Fault:
    """A deterministic end of the job as a Fault of its own kind: no traceback, no frames, nothing to patch in
    the code. The repairs find none, so the session ends saying what Slurm did and what would change it."""
    state = str(record.get("scheduler_state") or "UNKNOWN")
    reason = str(record.get("scheduler_reason") or "")
    shard = record.get("failed_shard")
    where = f"job {record.get('job_id')}" + (f" (shard {shard})" if shard is not None else "")
    message = (f"{state}{f' ({reason})' if reason else ''}: {where} — "
               f"{WHY.get(state, 'Slurm ended it without a result')}")
    return Fault(stage="crash", exc_type="SlurmJobEnded", message=message, frames=(),
                 fingerprint=f"slurm:{state}:{reason}", log_excerpt=log_tail)
