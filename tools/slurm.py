"""Slurm jobs on any Host (this machine, or a login node over SSH): the same commands a person would type.

A job is a folder on the host, like a detached run (tools/runs.py), so a restarted medic loses nothing:

    command.sh / command.<k>.sh   the command line with its cwd and env (one per shard of a job array)
    job.sh      the batch script: runs the shard's command.sh, then writes its exit code (tmp file + mv)
    jobid       what ``sbatch --parsable`` answered, written by the same shell line that submitted it
    log / log.<k>     the job's (or shard k's) stdout and stderr: sbatch ``--output``, opened for append
    exit / exit.<k>   the command's exit code, once it ended on its own (a job the scheduler killed has none);
                      removed when a run of the job starts (a requeued job's earlier run left its own)

State comes from ``scontrol show job`` while slurmctld remembers the job (MinJobAge), then from ``sacct`` (with
accounting storage) or ``sacct -c`` (a jobcomp file): the names are Slurm's own (COMPLETED, FAILED, TIMEOUT…).
"""

from __future__ import annotations

import re
import shlex
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools import ipc_dir
from tools.env_scripts import NOT_FOUND_TAIL
from tools.errors import HostError, HostUnreachable, RunError
from tools.host import Host, as_shell
from tools.runs import MAX_CHUNK, LogChunk

SHARD_PLACEHOLDER = "{shard}"  # in the command (and --validate): the shard's index
# Not Slurm's: scontrol got no answer from slurmctld (restarting, busy). Nothing is known, so nothing has ended.
UNANSWERED = "UNANSWERED"
# States in which the job may still produce output; every other state is final.
ACTIVE = frozenset({UNANSWERED, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD",
                    "SPECIAL_EXIT"})

# Each task has an IPC folder of its own (tools/ipc_dir.py), named in ``ipc[.<task>]``: removed when its command
# ends, also on scancel's TERM (the trap runs once the command has ended), and by medic (drop_ipc) once the job
# is over, for a task Slurm had to KILL.
_IPC_RECORD = '"$d/ipc${s:+.$s}"'
_JOB_SH = """#!/bin/sh
d=@DIR@
s=${SLURM_ARRAY_TASK_ID:-}
MEDIC_SHARD=$s; export MEDIC_SHARD
rm -f "$d/exit${s:+.$s}"
trap : TERM
@IPC@/bin/sh "$d/command${s:+.$s}.sh"
code=$?
""" + ipc_dir.drop_sh(_IPC_RECORD) + """f="$d/exit${s:+.$s}"
printf '%s\\n' "$code" > "$f.tmp" && mv -f "$f.tmp" "$f"
exit $code
"""


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    dir: str
    shards: tuple[int, ...] = ()  # the array's task ids; () for a plain job

    def log(self, shard: int | None = None) -> str:
        return f"{self.dir}/log" if shard is None else f"{self.dir}/log.{shard}"

    def exit_file(self, shard: int | None = None) -> str:
        return f"{self.dir}/exit" if shard is None else f"{self.dir}/exit.{shard}"

    @property
    def keys(self) -> tuple[int | None, ...]:
        return self.shards or (None,)


@dataclass(frozen=True)
class TaskState:
    """One job, or one task of an array, as Slurm says it is."""

    shard: int | None
    state: str  # Slurm's name: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, …
    reason: str = ""  # why it is PENDING (Priority, Resources, BeginTime, PartitionTimeLimit, …) or ended so
    exit_code: int | None = None
    signal: int | None = None
    restarts: int = 0

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def with_shard(command: Sequence[str], shard: int) -> list[str]:
    return [word.replace(SHARD_PLACEHOLDER, str(shard)) for word in command]


def submit(host: Host, command: Sequence[str], *, run_dir: str, job_name: str, cwd: str | None = None,
           env: Mapping[str, str] | None = None, partition: str | None = None,
           sbatch_args: Sequence[str] = (), shards: Sequence[int] = (), ipc_vars: Sequence[str] = ()) -> SlurmJob:
    """``sbatch`` the command (a job array over ``shards`` when given) under ``run_dir/<id>``; ``ipc_vars`` (the
    library's temp-dir variables, tools/ipc_dir.py) point at a folder of each task's own."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    folder = f"{run_dir.rstrip('/')}/{run_id}"
    quoted = shlex.quote(folder)
    made = host.run(f"command -v sbatch >/dev/null || {{ echo 'sbatch not found on PATH' >&2; exit 127; }}; "
                    f"mkdir -p {quoted}", timeout=30.0)
    if not made.ok:
        raise RunError(f"cannot prepare job folder {folder} on {host.name}: {made.stderr.strip()}")
    for shard in shards or (None,):
        words = list(command) if shard is None else with_shard(command, shard)
        shard_env = dict(env or {}) if shard is None else {**(env or {}), "MEDIC_SHARDS": str(len(shards))}
        name = "command.sh" if shard is None else f"command.{shard}.sh"
        host.write_bytes_atomic(f"{folder}/{name}",
                                f"{as_shell(words, cwd=cwd, env=shard_env)}\n{NOT_FOUND_TAIL}\n".encode())
    job_sh = _JOB_SH.replace("@IPC@", ipc_dir.make_sh(ipc_vars, _IPC_RECORD)).replace("@DIR@", quoted)
    host.write_bytes_atomic(f"{folder}/job.sh", job_sh.encode(), mode=0o755)
    options = ["--parsable", f"--job-name={job_name}", "--open-mode=append",
               f"--output={folder}/log" + (".%a" if shards else "")]
    if cwd:
        options.append(f"--chdir={cwd}")
    if partition:
        options.append(f"--partition={partition}")
    if shards:
        options.append("--array=" + ",".join(str(s) for s in shards))
    line = shlex.join(["sbatch", *options, *sbatch_args, f"{folder}/job.sh"])
    # the job id is on the host before this command returns: a medic killed right after still finds it
    answer = host.run(f"{line} > {quoted}/jobid.tmp && mv -f {quoted}/jobid.tmp {quoted}/jobid && cat {quoted}/jobid",
                      timeout=60.0)
    job_id = answer.stdout.strip().split(";")[0]
    if not answer.ok or not job_id.isdigit():
        raise RunError(f"sbatch refused the job on {host.name}: {answer.stderr.strip() or answer.stdout.strip()}")
    return SlurmJob(job_id, folder, tuple(shards))


def job_in_dir(host: Host, folder: str, shards: Sequence[int] = ()) -> SlurmJob | None:
    """The job submitted from ``folder``, if sbatch answered (its ``jobid`` file)."""
    try:
        job_id = host.read_bytes(f"{folder}/jobid").decode().strip().split(";")[0]
    except HostError:
        return None
    return SlurmJob(job_id, folder, tuple(shards)) if job_id.isdigit() else None


def find_by_name(host: Host, job_name: str) -> str | None:
    """The id of a job named ``job_name`` that slurmctld still knows (a submit whose answer was lost)."""
    found = host.run(["squeue", "-h", "-t", "all", "-n", job_name, "-o", "%F"], timeout=30.0)
    ids = [word for word in found.stdout.split() if word.isdigit()]
    return ids[0] if found.ok and ids else None


def follow(host: Host, job: SlurmJob, offset: int, shard: int | None = None, limit: int = MAX_CHUNK) -> LogChunk:
    """The shard's log bytes from ``offset`` on; nothing yet while the job is pending (no file)."""
    path = job.log(shard)
    try:
        data = host.read_bytes(path, offset, min(limit, MAX_CHUNK))
    except HostUnreachable:
        raise
    except HostError as exc:
        if not host.exists(job.dir):
            raise RunError(f"the folder of job {job.job_id} is gone from {host.name}: {exc}") from exc
        data = b""
    return LogChunk(data, offset + len(data))


_FIELD = re.compile(r"(\w+)=(\S*)")


def _exit(value: str) -> tuple[int | None, int | None]:
    code, _, sig = value.partition(":")
    return (int(code) if code.isdigit() else None), (int(sig) if sig.isdigit() else None)


def _shards_of(value: str) -> list[int]:
    """``0-3,5%2`` (a pending array's remaining tasks) as task ids."""
    ids: list[int] = []
    for part in value.split("%")[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            ids.extend(range(int(low), int(high or low) + 1))
    return ids


def parse_scontrol(text: str) -> list[TaskState]:
    """``scontrol show job -o`` lines as task states (a pending array's one line: one state per task)."""
    states: list[TaskState] = []
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "JobState" not in fields:
            continue
        code, sig = _exit(fields.get("ExitCode", ""))
        reason = "" if fields.get("Reason") in (None, "None") else fields["Reason"]
        restarts = int(fields.get("Restarts", "0") or 0) if fields.get("Restarts", "0").isdigit() else 0
        task = fields.get("ArrayTaskId")
        for shard in (_shards_of(task) if task else [None]):
            states.append(TaskState(shard, fields["JobState"], reason, code, sig, restarts))
    return states


def parse_sacct(text: str, job_id: str) -> list[TaskState]:
    """``sacct -n -P -X -o JobID,State,ExitCode,Reason`` lines (``5_2|CANCELLED by 0|0:15|…``); the last line of
    a task wins (a requeued job has one line per run)."""
    found: dict[int | None, TaskState] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3:
            continue
        jid, _, task = parts[0].partition("_")
        if jid != job_id or not parts[1]:
            continue
        code, sig = _exit(parts[2])
        shard = int(task) if task.isdigit() else None
        found[shard] = TaskState(shard, parts[1].split()[0], parts[3] if len(parts) > 3 else "", code, sig)
    return list(found.values())


def states(host: Host, job: SlurmJob) -> dict[int | None, TaskState]:
    """Each task's state. A task Slurm has forgotten and no record holds is read from its ``exit`` file (it ran
    to its end), else it is ``UNKNOWN``; while slurmctld does not answer, every task is ``UNANSWERED``."""
    answer = host.run(["scontrol", "show", "job", "-o", job.job_id], timeout=30.0)
    if not answer.ok and "Invalid job id" not in answer.stderr:  # unheard, not forgotten: no exit file is read
        said = " ".join(answer.stderr.split())[-200:] or f"exit {answer.exit_code}"  # (it may be an earlier run's)
        return {key: TaskState(key, UNANSWERED, said) for key in job.keys}
    found = {s.shard: s for s in parse_scontrol(answer.stdout)} if answer.ok else {}
    if not found:  # slurmctld forgot it (MinJobAge): accounting, else the jobcomp file
        for argv in (["sacct", "-n", "-P", "-X", "-j", job.job_id, "-o", "JobID,State,ExitCode,Reason"],
                     ["sacct", "-c", "-n", "-P", "-j", job.job_id, "-o", "JobID,State,ExitCode"]):
            answer = host.run(shlex.join(argv) + " 2>/dev/null", timeout=30.0)
            found = {s.shard: s for s in parse_sacct(answer.stdout, job.job_id)} if answer.ok else {}
            if found:
                break
    if found and not job.shards and None not in found:
        found = {None: next(iter(found.values()))}
    return {key: found.get(key) or from_exit_file(host, job, key) for key in job.keys}


def from_exit_file(host: Host, job: SlurmJob, shard: int | None) -> TaskState:
    try:
        text = host.read_bytes(job.exit_file(shard)).decode().strip()
    except HostError:
        return TaskState(shard, "UNKNOWN")
    code = int(text) if text.isdigit() else None
    return TaskState(shard, "COMPLETED" if code == 0 else "FAILED", "", code)


def drop_ipc(host: Host, job: SlurmJob) -> None:
    """Remove the IPC folders of a job that is over (a task Slurm KILLed never ran its own removal)."""
    each = ipc_dir.drop_sh('"$f"').strip()
    host.run(f'for f in {shlex.quote(job.dir)}/ipc {shlex.quote(job.dir)}/ipc.*; do [ -f "$f" ] && {{ {each}; }}; '
             f'done; exit 0', timeout=30.0)


def cancel(host: Host, job: SlurmJob, shards: Sequence[int] = (), wait: float = 30.0) -> None:
    """``scancel`` the job (or only ``shards`` of it) and wait until none of it is active any more."""
    targets = [f"{job.job_id}_{s}" for s in shards] if shards else [job.job_id]
    answer = host.run(["scancel", *targets], timeout=30.0)
    if not answer.ok and "Invalid job id" not in answer.stderr and "already completing" not in answer.stderr:
        raise RunError(f"scancel {' '.join(targets)} failed on {host.name}: {answer.stderr.strip()}")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        left = [s for key, s in states(host, job).items() if s.active and (not shards or key in shards)]
        if not left:
            return
        time.sleep(0.2)
    raise RunError(f"job {job.job_id} was cancelled but is still active after {wait:.0f}s")
