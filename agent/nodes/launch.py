"""launch and watch: start the job detached (once per launch id, whatever the checkpoint says), then follow it.

While the run loads, watch runs the checks of the last patch that need the target env (imports): the wait is
where a bad fix is caught before the run reaches it. A failed check stops the run at once.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from dataclasses import replace
from typing import Any

from agent.checks import ADVISORY, run_check
from agent.codec import check_from_dict
from agent.deps import Deps, Settings
from agent.job import with_interpreter
from agent.nodes.run_handle import RunHandle, log_path, run_handle
from agent.nodes.shard_runs import run_folders
from agent.remedies import env_edits, job_env, with_unset
from agent.repair.types import Check
from agent.shards import sharding
from agent.state import CheckResult, LaunchRecord, SessionState
from tools import runs
from tools.errors import HostError, HostUnreachable, RunError
from tools.host import FileStat

MAX_DIAGNOSE_BYTES = 64 * 1024 * 1024
RECONNECT_PAUSE = 2.0
STATUS_EVERY = 5.0  # seconds between status commands; the exit file is looked for (cheaply) every poll
DISK_FREE_MB = 1024  # outputs of a real extraction run are GBs; a warning below one GB
FREE_MEMORY_MB = 2048
LOADED_PHASES = ("loading", "kv_cache", "warmup", "extracting", "done")


def launch(state: SessionState, deps: Deps) -> dict[str, Any]:
    cfg = deps.config
    launches = list(state.get("launches") or [])
    server_update: dict[str, Any] = {}
    if cfg.target.server_command:  # a two-process job: a ready server first (agent/nodes/server.py)
        from agent.nodes.server import ensure_server

        server_update, crashed = ensure_server(state, deps)
        if crashed is not None:  # the server ended before it was ready: watch and diagnose read its log
            deps.record("launch", "launch", {"n": crashed["n"], "kind": "server", "run_dir": crashed["run_dir"]})
            return {**server_update, "launches": [*launches, crashed], "run": crashed}
    n = len(launches) + 1
    kind = "canary" if on_canary(state, deps) else "target"
    command = canary_commands(state, deps)[0] if kind == "canary" else cfg.target.command
    if server_update:
        from agent.nodes.server import for_client

        command, server_update = for_client(command or [], server_update, deps)
    # `python ...` means the target env's python, not the one first on the host's PATH
    command, replaced = with_interpreter(command or [], cfg.target.python)
    base = f"{cfg.host_dir}/runs/L{n}"
    ledger = f"{cfg.host_dir}/launches/L{n}.json"
    record: LaunchRecord = {"n": n, "kind": kind, "started": deps.clock(), "exit_code": None, "phases": {},
                            "checks_during_load": []}
    if cfg.slurm is not None:  # a Slurm job (or array) instead of a detached process
        from agent.nodes.slurm_launch import launch_job

        return launch_job(state, deps, record, command, base, ledger, substituted(replaced, cfg.target.python))
    if kind == "target" and sharding(cfg) is not None and not server_update:  # N detached runs, one per shard
        from agent.nodes.shard_runs import launch_shards

        return launch_shards(state, deps, record, command, base, ledger, substituted(replaced, cfg.target.python))
    earlier = launched_before(deps, base, ledger)
    if earlier:  # launched before medic died: reattach, never launch twice
        record["run_dir"] = earlier
        if not deps.host.exists(ledger):  # killed between the launch and its ledger line: write it now
            deps.host.write_bytes_atomic(ledger, json.dumps({"n": n, "run": earlier, "at": time.time()}).encode())
        deps.record("launch", "launch", {"n": n, "kind": kind, "run_dir": earlier, "reattached": True})
    else:
        deps.host.run(["mkdir", "-p", f"{cfg.host_dir}/launches"], timeout=30)
        base_env = cfg.target.env
        if server_update:
            from agent.nodes.server import WIDE_CONSOLE

            base_env = {**WIDE_CONSOLE, **base_env}
        env, unset = job_env(deps.host, base_env, env_edits(state.get("patches") or []))
        run = runs.launch(deps.host, with_unset(list(command or []), unset), run_dir=base, cwd=cfg.target.workdir,
                          env=env)
        deps.host.write_bytes_atomic(ledger, json.dumps({"n": n, "run": run.dir, "at": time.time()}).encode())
        record["run_id"], record["run_dir"] = run.id, run.dir
        deps.record("launch", "launch", {"n": n, "kind": kind, "run_dir": run.dir, "command": command,
                                         **substituted(replaced, cfg.target.python)})
    if server_update:
        server = server_update["servers"][-1]
        record["server"], record["server_log_offset"] = server["n"], server.get("log_offset", 0)
        record["server_run_dir"] = server["run_dir"]
    return {**server_update, "launches": [*launches, record], "run": record}


def substituted(replaced: str | None, python: str) -> dict[str, Any]:
    """For the trace: which bare interpreter name of the command was run as the target's python."""
    return {"interpreter": {"given": replaced, "ran": python}} if replaced else {}


def canary_commands(state: SessionState, deps: Settings) -> tuple[list[str] | None, list[str] | None]:
    """(run, validate) commands of the canary: given in the config, or derived by preflight."""
    target = deps.config.target
    if target.canary_command:
        return target.canary_command, target.canary_validate_command
    derived = (state.get("preflight") or {}).get("canary") or {}
    return derived.get("command"), derived.get("validate")


def on_canary(state: SessionState, deps: Settings) -> bool:
    """The canary runs first, until its output is verified: each fault it finds costs no big-model load."""
    return bool(deps.config.canary and canary_commands(state, deps)[0] and not state.get("canary_done"))


def target_launches(state: SessionState) -> int:
    # a server that crashed while loading cost a load too
    return sum(1 for launch_ in state.get("launches") or [] if launch_.get("kind", "target") in ("target", "server"))


def launched_before(deps: Deps, base: str, ledger: str) -> str | None:
    """The run folder of launch ``base`` if it was started already (ledger, or a run folder with a pid)."""
    if deps.host.exists(ledger):
        with contextlib.suppress(ValueError, KeyError):
            return str(json.loads(deps.host.read_bytes(ledger))["run"])
    found = deps.host.run(f"ls -1d {shlex.quote(base)}/*/pid 2>/dev/null | head -1", timeout=30)
    path = found.stdout.strip()
    return path.rsplit("/", 1)[0] if path else None


def watch(state: SessionState, deps: Deps) -> dict[str, Any]:
    record: LaunchRecord = dict(state["run"] or {})  # type: ignore[assignment]
    handle = run_handle(deps, record)
    ctx = deps.context(state)
    owners = [c.get("patch_id") for c in state.get("pending_checks") or []]  # which patch each check proves
    pending = [check_from_dict(c) for c in state.get("pending_checks") or []] + environment_checks(state, deps)
    results: list[CheckResult] = []
    deps.record("checks_queued", "watch", {"launch": record["n"], "checks": [c.describe() for c in pending]})
    offset, tail = 0, ""
    seen_phases: dict[str, float] = dict(record.get("phases") or {})
    started = record.get("started") or deps.clock()
    deadline = started + deps.config.budgets.launch_timeout
    eta = runs.LoadEta([launch_.get("load_seconds") or 0.0 for launch_ in state.get("launches") or []
                        if launch_.get("load_seconds") and launch_.get("kind") == record.get("kind")])
    outcome = None
    last_status = 0.0
    link_down_since: float | None = None
    while True:
        try:
            chunk, status, last_status = poll(deps, handle, offset, last_status)
        except HostUnreachable as err:  # the job is detached: wait for the link, lose nothing (byte offsets)
            now = deps.clock()
            if link_down_since is None:
                link_down_since = now
                deps.record("warning", "watch", {"message": f"lost the host, the job goes on: {err}"})
            if now > deadline:
                raise
            time.sleep(RECONNECT_PAUSE)
            continue
        if link_down_since is not None:
            deps.record("warning", "watch", {"message": f"host back after {deps.clock() - link_down_since:.0f}s"})
            link_down_since = None
        offset = chunk.offset
        text = tail + chunk.data.decode("utf-8", errors="replace")
        cut = max(text.rfind("\n"), text.rfind("\r"))
        complete, tail = (text[: cut + 1], text[cut + 1 :]) if cut >= 0 else ("", text)
        for event in runs.phases(complete):
            first = event.phase not in seen_phases
            if first:
                seen_phases[event.phase] = round(deps.clock() - started, 3)
            if first or (event.progress and event.phase == "loading"):
                pct = event.progress.percent if event.progress else None
                remaining = eta.remaining(deps.clock() - started, event.progress) if event.phase == "loading" else None
                deps.record("phase", "watch", {"phase": event.phase, "percent": pct, "eta": remaining,
                                               "launch": record["n"]})
        if pending and status.state == "running":
            check = pending[0]  # one check per poll, so the log keeps flowing between them
            try:
                ok, detail = run_check(ctx, check, deps.config.target.env)
            except HostUnreachable:
                time.sleep(RECONNECT_PAUSE)
                continue  # the link dropped: poll() waits for it, then the same check runs again
            pending.pop(0)
            owner = owners.pop(0) if owners else None
            result = CheckResult(check=check.describe(), ok=ok, detail=detail, when="during_load",
                                 phase=next(reversed(seen_phases), "starting"), launch=record["n"])
            results.append(result)
            deps.record("check", "watch", dict(result))
            if not ok and check.kind in ADVISORY:
                deps.record("warning", "watch", {"message": f"{check.describe()}: {detail}"})
            elif not ok:
                handle.stop()
                outcome = f"stopped:check failed: {check.describe()}"
                record["failed_patch"] = owner
                break
            continue
        if status.state != "running":
            if pending:  # the run ended before its load: the checks still tell whether the patch is sound
                for check in pending:
                    ok, detail = run_check(ctx, check, deps.config.target.env)
                    result = CheckResult(check=check.describe(), ok=ok, detail=detail, when="after_exit",
                                         launch=record["n"])
                    results.append(result)
                    deps.record("check", "watch", dict(result))
                pending = []
            outcome = handle.finish(record, status)
            break
        if deps.clock() > deadline:
            handle.stop()
            outcome = "timeout"
            break
        time.sleep(deps.poll_interval)
    record["outcome"], record["ended"], record["phases"] = outcome or "", deps.clock(), seen_phases
    record["checks_during_load"], record["load_seconds"] = results, load_seconds(seen_phases)
    deps.record("run_end", "watch", {"outcome": outcome, "exit_code": record.get("exit_code"),
                                     "seconds": round(record["ended"] - started, 1), "launch": record["n"],
                                     "phases": seen_phases, "failed_patch": record.get("failed_patch")})
    launches = [record if launch_.get("n") == record["n"] else launch_ for launch_ in state.get("launches") or []]
    return {"run": record, "launches": launches, "pending_checks": [],
            "verifications": [*(state.get("verifications") or []), *results]}


def poll(deps: Deps, handle: RunHandle, offset: int, last_status: float
         ) -> tuple[runs.LogChunk, runs.RunStatus, float]:
    """New log bytes and the run's state. Status costs a whole command over SSH: ask it only when the log is
    quiet and either STATUS_EVERY has passed or the exit file has appeared."""
    chunk = handle.follow(offset)
    if chunk.data or (deps.clock() - last_status < STATUS_EVERY and not handle.ended_hint()):
        return chunk, runs.RunStatus("running"), last_status
    return chunk, handle.status(), deps.clock()


def environment_checks(state: SessionState, deps: Settings) -> list[Check]:
    """What the host needs for this run to finish, checked while it loads (advisory: never blamed on a patch)."""
    record = state.get("run") or {}
    earlier = [folder for launch_ in state.get("launches") or [] if launch_.get("n") != record.get("n")
               for folder in run_folders(launch_)]
    return [Check("disk_free", deps.config.target.workdir, str(DISK_FREE_MB), when="during_load"),
            Check("free_memory", "host", str(FREE_MEMORY_MB), when="during_load"),
            Check("stale_runs", "session", "|".join(earlier[-5:]), when="during_load")]


def end_runs(state: SessionState, deps: Deps) -> None:
    """The session ends: no process of any of its runs may outlive it (one stopped by a failed check, one
    whose wrapper was killed from outside). Each run's wrapper reaps its own on exit; this is for the rest."""
    folders = [folder for launch_ in state.get("launches") or [] if not launch_.get("job_id")
               for folder in run_folders(launch_)]
    if deps.config.target.server_command:
        from agent.nodes.server import server_runs

        kept = server_runs(state)[-1:] if deps.config.target.keep_server else []
        folders = [folder for folder in dict.fromkeys([*folders, *server_runs(state)]) if folder not in kept]
    try:
        cancel_jobs(state, deps)
        runs.stop_all(deps.host, [runs.Run.in_dir(folder) for folder in folders])
    except (RunError, HostError) as err:  # the report still gets written; the trace says what may be left
        deps.record("warning", "report", {"message": f"could not make sure every run has ended: {err}"})


def load_seconds(phases: dict[str, float]) -> float | None:
    """Seconds from launch to the end of loading (the first phase after it), the part a fix cannot save."""
    after = [phases[p] for p in LOADED_PHASES[1:] if p in phases]
    return min(after) if after else None


def read_log(deps: Deps, record: LaunchRecord) -> bytes:
    """The run's log for diagnosis: all of it up to MAX_DIAGNOSE_BYTES, else its last MAX_DIAGNOSE_BYTES
    (tracebacks are at the end; a multi-GB log of progress bars must not be read whole)."""
    run = runs.Run.in_dir(record["run_dir"])
    run = replace(run, log=log_path(record))
    size = (deps.host.stat(run.log) or FileStat(0, 0, 0, False, False)).size
    offset = max(0, size - MAX_DIAGNOSE_BYTES)
    parts: list[bytes] = []
    while True:
        try:
            chunk = runs.follow(deps.host, run, offset)
        except (RunError, HostError):
            break
        if not chunk.data:
            break
        parts.append(chunk.data)
        offset = chunk.offset
    return b"".join(parts)


def cancel_jobs(state: SessionState, deps: Deps) -> None:
    """A Slurm session ends: none of its jobs stays queued or running."""
    from tools import slurm

    for launch_ in state.get("launches") or []:
        if launch_.get("job_id"):
            job = slurm.SlurmJob(launch_["job_id"], launch_["run_dir"], tuple(launch_.get("shards") or ()))
            if any(task.active for task in slurm.states(deps.host, job).values()):
                slurm.cancel(deps.host, job)
