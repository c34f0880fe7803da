"""Launches as Slurm jobs (``--scheduler slurm``): submit once per launch id, follow, and sort how the job ended.

watch sees the job through a RunHandle like a detached run's. A launch's ledger line holds the job id, and the
job's name says which session and launch it is, so a medic that died at any point reattaches to the same job and
never submits twice. How Slurm ended a job is explained as a fault of its own kind (scheduler_fault).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection
from typing import Any

from agent.config import SessionConfig
from agent.launch_records import LaunchRecord, SlurmLaunch
from agent.launchers.base import (
    Explained,
    LauncherDeps,
    LaunchPlan,
    RunHandle,
    ipc_variables,
    job_environment,
    write_ledger,
)
from agent.launchers.shard_logs import explaining_shard
from agent.remedies import with_unset
from agent.repair.types import Fault
from agent.scheduler import DETERMINISTIC_STATES, NEVER_STARTS, TRANSIENT_STATES, SlurmSettings
from agent.state import SessionState
from tools import runs, slurm
from tools.host import Host


def job_name(config: SessionConfig, n: int) -> str:
    """What ``squeue`` shows: medic, the session, its instance and the launch (unique, so a lookup by name is exact)."""
    return f"medic-{config.session_id}-{config.instance}-L{n}"


class SlurmLauncher:
    def __init__(self, deps: LauncherDeps) -> None:
        self.deps = deps
        assert deps.config.slurm is not None
        self.settings: SlurmSettings = deps.config.slurm

    def start(self, state: SessionState, plan: LaunchPlan, env_base: dict[str, str] | None = None
              ) -> dict[str, Any]:
        deps, host, cfg = self.deps, self.deps.host, self.deps.config
        n, kind, base, ledger = plan.n, plan.kind, plan.base(cfg), plan.ledger(cfg)
        name = job_name(cfg, n)
        update: dict[str, Any] = {}
        job = submitted_before(host, base, ledger, name)
        if job is not None:  # submitted before medic died: reattach, never submit twice
            if not host.exists(ledger):
                ledger_job(host, ledger, n, job)
            deps.record("launch", "launch", {"n": n, "kind": kind, "run_dir": job.dir, "job_id": job.job_id,
                                             "shards": list(job.shards), "reattached": True})
        else:
            shards, update = plan.plan_shards()
            host.run(["mkdir", "-p", f"{cfg.host_dir}/launches"], timeout=30)
            env, unset = job_environment(deps, state, env_base, plan.env)
            job = slurm.submit(host, with_unset(plan.command, unset), run_dir=base, job_name=name,
                               cwd=cfg.target.workdir, env=env, partition=self.settings.partition,
                               sbatch_args=self.settings.sbatch_args, shards=shards, ipc_vars=ipc_variables(deps))
            ledger_job(host, ledger, n, job)
            deps.record("launch", "launch", {"n": n, "kind": kind, "run_dir": job.dir, "command": plan.command,
                                             "job_id": job.job_id, "job_name": name, "shards": list(job.shards),
                                             **plan.trace_extra})
        record: SlurmLaunch = {**plan.fields(), "launcher": "slurm", "run_id": job.dir.rsplit("/", 1)[-1],
                               "run_dir": job.dir, "job_id": job.job_id, "shards": list(job.shards)}
        return {**update, "launches": [*(state.get("launches") or []), record], "run": record}

    def handle(self, record: LaunchRecord) -> RunHandle:
        assert record["launcher"] == "slurm", "every launch of a Slurm session is a Slurm job"
        return SlurmHandle(self.deps, record)

    def log_of(self, record: LaunchRecord) -> str:
        """The failed (else the first) shard's log of a job array; a plain job's one log."""
        folder = record["run_dir"].rstrip("/")
        if record["launcher"] != "slurm" or not record.get("shards"):
            return f"{folder}/log"
        shard = record.get("failed_shard")
        return f"{folder}/log.{shard if shard is not None else record['shards'][0]}"

    def explain(self, state: SessionState, record: LaunchRecord, fault: Fault) -> Explained:
        # Slurm ended it: that is the fault
        if record["launcher"] == "slurm" and str(record.get("outcome") or "").startswith("scheduler:"):
            return Explained(scheduler_fault(record, fault.log_excerpt))
        return Explained(fault)

    def end(self, state: SessionState, spare: Collection[str] = ()) -> None:
        """A Slurm session ends: none of its jobs stays queued or running."""
        for launch in state.get("launches") or []:
            if launch["launcher"] == "slurm":
                job = slurm.SlurmJob(launch["job_id"], launch["run_dir"], tuple(launch.get("shards") or ()))
                if any(task.active for task in slurm.states(self.deps.host, job).values()):
                    slurm.cancel(self.deps.host, job)
                slurm.drop_ipc(self.deps.host, job)


def ledger_job(host: Host, ledger: str, n: int, job: slurm.SlurmJob) -> None:
    write_ledger(host, ledger, {"n": n, "run": job.dir, "job_id": job.job_id, "shards": list(job.shards)})


def submitted_before(host: Host, base: str, ledger: str, name: str) -> slurm.SlurmJob | None:
    """The job of launch ``base``: from its ledger line, else its folder's ``jobid``, else its name in squeue."""
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

    def __init__(self, deps: LauncherDeps, record: SlurmLaunch) -> None:
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
        waiting = pending or [s for s in self.last.values() if s.state == slurm.UNANSWERED]
        reason = waiting[0].reason if waiting else ""
        if reason != self.reason:  # why it waits, once per change: Priority, Resources, BeginTime, no answer…
            self.reason = reason
            if reason:
                self.deps.record("scheduler", "watch", {"job_id": self.job.job_id, "state": waiting[0].state,
                                                        "reason": reason, "launch": self.record["n"]})
        if reason in NEVER_STARTS and len(pending) == sum(1 for s in self.last.values() if s.active):
            self.stuck = reason  # as submitted it can never start here: no use waiting for the time budget
            self.stop()
            return runs.RunStatus("exited", None)
        if any(s.active for s in self.last.values()):
            return runs.RunStatus("running")
        slurm.drop_ipc(self.deps.host, self.job)  # over: what a task Slurm KILLed left (its own removal never ran)
        return runs.RunStatus("exited", self.first_failure_code())

    def first_failure_code(self) -> int | None:
        codes = [s.exit_code for s in self.last.values() if s.state != "COMPLETED"]
        return codes[0] if codes else 0

    def stop(self) -> None:
        slurm.cancel(self.deps.host, self.job)

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str:
        """How the job ended, in the record's words: ``exited``, ``crashed`` (the job's own failure: diagnose
        reads its log) or ``scheduler:<STATE>`` (Slurm ended it: transient ones are resubmitted)."""
        assert record["launcher"] == "slurm"  # the record this handle was made for
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


# What each deterministic end means to the person who reads the report, and what would change it.
WHY = {
    "TIMEOUT": "Slurm killed it at its time limit: give it more (--sbatch-arg=--time=...) or make it faster",
    "OUT_OF_MEMORY": "Slurm killed it for using more memory than it asked for: ask for more (--sbatch-arg=--mem=...)",
    "CANCELLED": "someone other than medic cancelled it (scancel, or an administrator)",
    "DEADLINE": "it passed the deadline it was submitted with (sbatch's --deadline, given through --sbatch-arg)",
    "PENDING": "it can never start as submitted",
}


def scheduler_fault(record: SlurmLaunch, log_tail: str) -> Fault:
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
