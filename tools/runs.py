"""Detached runs on any Host, and what a vLLM log says about how far a run has got.

A run is a folder on the host, and everything medic knows about it is read back from there, so neither a
dropped connection nor a restarted agent loses anything:

    command.sh  the command line, with its cwd and env; on exit 127 it logs the PATH it ran with
    run.sh      the wrapper: writes ``pid`` first, runs command.sh, then writes ``exit`` (tmp file + mv)
    log         stdout and stderr of the command, appended
    pid         the wrapper's pid, which is also the run's process group (it starts a new session)
    exit        the command's exit code, present only once it has ended and nothing of the run is left

Every process of a run carries ``MEDIC_RUN=<its folder>`` in its environment, so a worker that left the
run's process group or session is still found when the run ends (tools/run_procs.py).
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tools import ipc_dir
from tools.env_scripts import NOT_FOUND_TAIL
from tools.errors import HostError, HostUnreachable, RunError
from tools.host import Command, Host, as_shell
from tools.run_procs import PROCS_SH

MAX_CHUNK = 4 * 1024 * 1024  # one follow() call reads at most this much, so a huge log cannot stall it
KILLED_EXIT_CODE = 128 + 9  # what ``exit`` says when stop() had to SIGKILL the wrapper itself

RunState = Literal["running", "exited", "vanished"]
Phase = Literal["importing", "loading", "kv_cache", "warmup", "extracting", "done"]


@dataclass(frozen=True)
class Run:
    id: str
    dir: str
    log: str
    pid: str
    exit: str
    command: str

    @classmethod
    def in_dir(cls, run_dir: str, command: str = "") -> Run:
        """The run whose folder is ``run_dir``: how a restarted agent picks up a run it launched earlier."""
        folder = run_dir.rstrip("/")
        return cls(id=folder.rsplit("/", 1)[-1], dir=folder, log=f"{folder}/log", pid=f"{folder}/pid",
                   exit=f"{folder}/exit", command=command)


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    offset: int  # where the next follow() should start


@dataclass(frozen=True)
class RunStatus:
    state: RunState
    exit_code: int | None = None
    pid: int | None = None


# The run's own IPC folder (tools/ipc_dir.py): short, under the temp dir, its path kept in ``ipc`` so that stop()
# removes it too when the wrapper itself had to be killed.
_DROP_IPC_SH = ipc_dir.drop_sh()

# Written by medic. The pid comes first, so a run is never without one; the exit code is renamed into place,
# so a reader sees no exit file or a whole one. The TERM trap lets stop() TERM the whole group and still get
# the command's own exit code written, since the trap only runs once the command has ended. What the command
# left behind (a worker, a daemon) is ended before the exit file appears: an ended run has no process left.
_WRAPPER_SH = r"""#!/bin/sh
d=@DIR@
echo $$ > "$d/pid.tmp" && mv -f "$d/pid.tmp" "$d/pid"
trap : TERM
@IPC@/bin/sh "$d/command.sh"
code=$?
""" + PROCS_SH + r"""reap $$ "MEDIC_RUN=$d" @GRACE@
""" + _DROP_IPC_SH + r"""printf '%s\n' "$code" > "$d/exit.tmp" && mv -f "$d/exit.tmp" "$d/exit"
"""
REAP_GRACE = 5.0  # seconds between TERM and KILL for what is left of a run whose command has ended


def launch(host: Host, command: Command, *, run_dir: str, cwd: str | None = None,
           env: Mapping[str, str] | None = None, ipc_vars: Sequence[str] = ()) -> Run:
    """Start ``command`` detached under ``run_dir/<id>`` and return once its pid file exists. ``ipc_vars`` (the
    library's temp-dir variables, tools/ipc_dir.py) point at a folder of the run's own, removed when it ends."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    line = as_shell(command, cwd=cwd, env=env)
    run = Run.in_dir(f"{run_dir.rstrip('/')}/{run_id}", command=line)
    folder = shlex.quote(run.dir)
    made = host.run(f"command -v setsid >/dev/null || {{ echo 'setsid not found' >&2; exit 127; }}; "
                    f"mkdir -p {folder}", timeout=30.0)
    if not made.ok:
        raise RunError(f"cannot prepare run folder {run.dir} on {host.name}: {made.stderr.strip()}")
    host.write_bytes_atomic(f"{run.dir}/command.sh", f"{line}\n{NOT_FOUND_TAIL}\n".encode(), mode=0o644)
    wrapper = (_WRAPPER_SH.replace("@IPC@", ipc_dir.make_sh(ipc_vars))
               .replace("@DIR@", folder).replace("@GRACE@", str(seconds(REAP_GRACE))))
    host.write_bytes_atomic(f"{run.dir}/run.sh", wrapper.encode(), mode=0o755)
    # setsid: a new session and process group, so no hangup, no job control and no timeout of the
    # launching shell can reach the run; stdin from /dev/null and output to the log leave no pipe open.
    # MEDIC_RUN: every process of the run inherits it, so one that leaves the run's group is still found.
    started = host.run(
        f"MEDIC_RUN={folder} setsid nohup /bin/sh {folder}/run.sh >> {folder}/log 2>&1 < /dev/null & "
        f"i=0; while [ ! -s {folder}/pid ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
        f"cat {folder}/pid", timeout=30.0)
    if not started.ok or not started.stdout.strip().isdigit():
        raise RunError(f"run {run.id} did not start on {host.name} (no pid after 10s): "
                       f"{started.stderr.strip() or 'see ' + run.log}")
    return run


def follow(host: Host, run: Run, offset: int, limit: int = MAX_CHUNK) -> LogChunk:
    """The log bytes from ``offset`` on (at most ``limit``); pass the returned offset to the next call."""
    try:
        data = host.read_bytes(run.log, offset, min(limit, MAX_CHUNK))
    except HostUnreachable:
        raise
    except HostError as exc:
        what = "log" if host.exists(run.dir) else "run folder"
        raise RunError(f"the {what} of run {run.id} is gone from {host.name}: {exc}") from exc
    return LogChunk(data, offset + len(data))


def _script(runs_: Sequence[Run], body: str) -> str:
    """``body`` once per run, with ``$d`` its folder and ``$m`` its marker, after the process functions."""
    return PROCS_SH + "".join(
        f"d={shlex.quote(run.dir)}; m={shlex.quote('MEDIC_RUN=' + run.dir)}; grace={seconds(REAP_GRACE)}\n"
        f"( {body}\n)\n" for run in runs_)


def seconds(grace: float) -> int:
    """A grace in whole seconds, as the shell counts them (``date +%s``), never below one."""
    return max(1, math.ceil(grace))


_STATUS_SH = """[ -d "$d" ] || { echo missing; exit 0; }
p=$(cat "$d/pid" 2>/dev/null)
[ -f "$d/exit" ] && { reap "" "$m" "$grace"; echo exited "$p" "$(cat "$d/exit")"; exit 0; }
[ -n "$p" ] && ingroup "$p" && { echo running "$p"; exit 0; }
reap "" "$m" "$grace"
[ -f "$d/exit" ] && { echo exited "$p" "$(cat "$d/exit")"; exit 0; }
echo vanished "$p"
"""


def status(host: Host, run: Run) -> RunStatus:
    """exited (with its code), running, or vanished: no exit code and nothing of it left. Whatever of an
    ended run is still alive (a worker of a wrapper that was killed) is ended before the run is said to be."""
    answer = host.run(_script([run], _STATUS_SH), timeout=REAP_GRACE + 30.0)
    words = answer.stdout.split()
    if not answer.ok or not words:
        raise RunError(f"cannot read the state of run {run.id} on {host.name}: {answer.stderr.strip()}")
    if words[0] == "missing":
        raise RunError(f"run folder {run.dir} is gone from {host.name}")
    pid = int(words[1]) if len(words) > 1 and words[1].isdigit() else None
    code = int(words[2]) if len(words) > 2 and words[2].lstrip("-").isdigit() else None
    state: RunState = "exited" if words[0] == "exited" else "running" if words[0] == "running" else "vanished"
    if state == "vanished" and pid is None:  # the launch wrote its pid before it returned: the folder was emptied
        raise RunError(f"run folder {run.dir} lost what the run wrote in it (no pid, no exit code) on {host.name}")
    return RunStatus(state, code, pid)


def _stop_sh(grace: float) -> str:
    # the wrapper's group and session count only while it lives; an exit code is written only for a run
    # whose wrapper had to be KILLed (one that ended on TERM writes its command's own)
    return f"""[ -d "$d" ] || exit 0
p=$(cat "$d/pid" 2>/dev/null)
{{ [ ! -f "$d/exit" ] && ours "$p" "$m"; }} || p=""
reap "$p" "$m" {seconds(grace)} && [ -n "$p" ] && {{ sleep 0.1; [ -f "$d/exit" ] || {{
  echo {KILLED_EXIT_CODE} > "$d/exit.tmp" && mv -f "$d/exit.tmp" "$d/exit"; }}; }}
[ -f "$d/exit" ] && {{ {_DROP_IPC_SH.strip()}; }}
exit 0"""


def stop(host: Host, run: Run, grace: float | None = None) -> RunStatus:
    """TERM every process of the run, wait up to ``grace`` seconds (REAP_GRACE), then KILL what is left."""
    stop_all(host, [run], grace)
    return status(host, run)


def stop_all(host: Host, runs_: Sequence[Run], grace: float | None = None) -> None:
    """stop() for many runs in one command (a session's end, over SSH): none of their processes is left."""
    if not runs_:
        return
    grace = REAP_GRACE if grace is None else grace
    result = host.run(_script(runs_, _stop_sh(grace)), timeout=len(runs_) * (grace + 1.0) + 30.0)
    if not result.ok:
        names = ", ".join(run.id for run in runs_)
        raise RunError(f"cannot stop run(s) {names} on {host.name}: {result.stderr.strip()}")


# -- what the log says -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Progress:
    """One tqdm bar update: ``50% ... | 1/2 [00:05<00:05, ...]``."""

    percent: float
    done: int
    total: int
    elapsed: float | None
    remaining: float | None


@dataclass(frozen=True)
class PhaseEvent:
    phase: Phase
    line: str
    progress: Progress | None = None
    took: float | None = None  # seconds from "... took 0.35 seconds" lines


# First match wins, so a line that fits two rows (a 100% prompt bar) is listed under the later phase first.
PHASE_PATTERNS: tuple[tuple[Phase, str], ...] = (
    ("done", r"Processed prompts:\s*100%"),
    ("extracting", r"Adding requests|Processed prompts"),
    ("warmup", r"init engine \(profile, create kv cache, warmup model\) took|Capturing CUDA graph|"
               r"Graph capturing finished|[Ww]arming up|torch\.compile takes|Compiling a graph"),
    ("kv_cache", r"GPU KV cache size|Maximum concurrency|# (?:GPU|CPU|cpu) blocks|Available KV cache memory|"
                 r"Memory profiling takes"),
    ("loading", r"Starting to load model|Loading model|Loading weights|Loading (?:safetensors|pt) checkpoint "
                r"shards|Model loading took"),
    ("importing", r"Automatically detected platform|Initializing an? (?:V1 )?LLM engine|non-default args|"
                  r"vLLM API server version"),
)
_COMPILED = tuple((phase, re.compile(pattern)) for phase, pattern in PHASE_PATTERNS)
_BAR = re.compile(r"(?P<percent>\d+(?:\.\d+)?)%[^|]*\|(?:[^|]*\|)?\s*(?P<done>\d+)/(?P<total>\d+)"
                  r"(?:\s*\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+))?")
_TOOK = re.compile(r"\b(?:took|takes)\b.*?(?P<seconds>\d+(?:\.\d+)?)\s*(?:seconds|secs?|s)\b")


def _clock(text: str | None) -> float | None:
    """tqdm's ``MM:SS`` or ``H:MM:SS`` in seconds; None for ``?``."""
    if not text or not text.replace(":", "").isdigit():
        return None
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def phases(text: str) -> list[PhaseEvent]:
    """Every line of ``text`` that marks a phase, in order. tqdm's ``\\r`` updates count as lines."""
    events = []
    for raw in re.split(r"[\r\n]+", text):
        line = raw.strip()
        phase = next((name for name, pattern in _COMPILED if pattern.search(line)), None)
        if phase is None:
            continue
        bar, took = _BAR.search(line), _TOOK.search(line)
        progress = None
        if bar:
            progress = Progress(float(bar["percent"]), int(bar["done"]), int(bar["total"]),
                                _clock(bar["elapsed"]), _clock(bar["remaining"]))
        events.append(PhaseEvent(phase, line, progress, float(took["seconds"]) if took else None))
    return events


@dataclass(frozen=True)
class LoadEta:
    """Seconds until loading ends: from this run's shard bar once it moves, else from earlier loads."""

    earlier_loads: Sequence[float] = ()  # load durations of earlier runs of the same target, in seconds

    def remaining(self, seconds_loading: float, progress: Progress | None = None) -> float | None:
        if progress is not None and progress.total and progress.done >= progress.total:
            return 0.0
        if progress is not None and progress.done > 0 and progress.elapsed:
            return progress.elapsed / progress.done * (progress.total - progress.done)
        if self.earlier_loads:
            return max(0.0, statistics.median(self.earlier_loads) - seconds_loading)
        return None
