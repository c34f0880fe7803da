"""watch: follow the launch through the launcher's RunHandle until it ends, is stopped, or times out.

While the run loads, watch runs the checks of the last patches that need the target env (imports): the wait is
where a bad fix is caught before the run reaches it. A failed check stops the run at once. The checks run one at a
time in a thread beside the loop (an import of vLLM takes seconds), so the log is read, and its phases told, while
they run.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any, cast

from agent.checks import blames_patch, run_leading
from agent.codec import check_from_dict
from agent.deps import Deps, Settings
from agent.launch_records import LaunchRecord
from agent.launchers.base import RunHandle, run_folders
from agent.launchers.beside import stop_beside
from agent.patch_records import CheckResult
from agent.repair.types import Check, RepairContext
from agent.state import SessionState
from tools import runs
from tools.errors import HostUnreachable, MedicError

RECONNECT_PAUSE = 2.0
STATUS_EVERY = 5.0  # seconds between status commands; the exit file is looked for (cheaply) every poll
DISK_FREE_MB = 1024  # outputs of a real extraction run are GBs; a warning below one GB
FREE_MEMORY_MB = 2048
LOADED_PHASES = ("loading", "kv_cache", "warmup", "extracting", "done")
OVERTAKEN = "stopped:the target started beside it ended first"  # a canary's: agent/launchers/beside.py


def watch(state: SessionState, deps: Deps) -> dict[str, Any]:
    current = state.get("run")
    assert current is not None, "watch follows the launch the launch node just made"
    record = cast(LaunchRecord, dict(current))  # a copy: the handle writes how it ended into it
    handle = deps.launcher.handle(record)
    owners = [c.get("patch_id") for c in state.get("pending_checks") or []]  # which patch each check proves
    pending = [check_from_dict(c) for c in state.get("pending_checks") or []] + environment_checks(state, deps)
    found_on_resume(deps, record, handle)
    deps.record("checks_queued", "watch", {"launch": record["n"], "checks": [c.describe() for c in pending]})
    return follow(state, deps, handle, record, BesideTheLoad(deps, deps.context(state), pending, owners, record["n"]))


class BesideTheLoad:
    """The launch's checks, one at a time in a thread of their own, so a slow one (an import of vLLM) never holds
    up reading the log. Their results are recorded by the loop, in order, as they come. The thread is a daemon:
    medic stopped never waits for a check (its probe ends with medic: tools/host.py)."""

    def __init__(self, deps: Deps, ctx: RepairContext, pending: list[Check], owners: list[str | None],
                 launch: int) -> None:
        self.deps, self.ctx, self.pending, self.owners, self.launch = deps, ctx, pending, owners, launch
        self.results: list[CheckResult] = []
        self.running: Future[list[tuple[bool, str]]] | None = None

    def start(self) -> None:
        if not self.pending or self.running is not None:
            return
        future: Future[list[tuple[bool, str]]] = Future()
        pending, env = list(self.pending), self.deps.config.target.env

        def work() -> None:
            try:
                future.set_result(run_leading(self.ctx, pending, env))  # imports side by side: one process
            except BaseException as exc:  # handed to the loop, which raises or waits for the link
                future.set_exception(exc)

        threading.Thread(target=work, name="medic-check", daemon=True).start()
        self.running = future

    def finished(self, when: str, phase: str | None, wait: bool = False) -> tuple[Check, str | None, bool] | None:
        """The check that just ended — (check, the patch it proves, ok) — recorded; None while it runs. A host
        that dropped leaves it queued: it runs again once poll() has the link back."""
        if self.running is None or not (wait or self.running.done()):
            return None
        future, self.running = self.running, None
        try:
            answers = future.result()
        except HostUnreachable:
            if wait:  # the run has ended: nothing to wait for but the link, as before
                raise
            time.sleep(RECONNECT_PAUSE)
            return None
        for ok, detail in answers:  # only the last may have failed (agent/checks.py run_leading)
            check = self.pending.pop(0)
            owner = self.owners.pop(0) if self.owners else None
            result = CheckResult(check=check.describe(), ok=ok, detail=detail, when=when, launch=self.launch)
            if phase is not None:
                result["phase"] = phase
            self.results.append(result)
            self.deps.record("check", "watch", dict(result))
        return check, owner, ok


def follow(state: SessionState, deps: Deps, handle: RunHandle, record: LaunchRecord,
           checks: BesideTheLoad) -> dict[str, Any]:
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
            asked = last_status
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
        if status.state == "running" and last_status != asked and overtaken(deps, record):  # once per status
            handle.stop()  # the canary saves a target load only until that load is over
            outcome, record["failed_patch"] = after_the_checks(checks) or (OVERTAKEN, None)
            break
        if status.state == "running":
            done = checks.finished("during_load", next(reversed(seen_phases), "starting"))
            if done is not None and not done[2] and blames_patch(done[0].kind, checks.results[-1]["detail"]):
                handle.stop()
                outcome = f"stopped:check failed: {done[0].describe()}"
                record["failed_patch"] = done[1]
                break
            if done is not None and not done[2]:
                deps.record("warning", "watch", {"message": f"{done[0].describe()}: {checks.results[-1]['detail']}"})
            checks.start()  # the next one, while the log goes on being read
        else:
            # the run ended before its load: the checks still tell whether the patch is sound
            while checks.pending:
                checks.start()
                checks.finished("after_exit", None, wait=True)
            outcome = handle.finish(record, status)
            break
        if deps.clock() > deadline:
            handle.stop()
            outcome = "timeout"
            break
        time.sleep(deps.poll_interval)
    if record.get("kind") == "canary" and outcome not in ("exited", OVERTAKEN):
        stop_beside(deps.host, record)  # its load is for code about to change
    update = run_ended(state, record, outcome or "", deps.clock(), seen_phases, checks.results)
    deps.record("run_end", "watch", {"outcome": outcome, "exit_code": record.get("exit_code"),
                                     "seconds": round(update["run"]["ended"] - started, 1), "launch": record["n"],
                                     "phases": seen_phases, "failed_patch": record.get("failed_patch")})
    return update


def run_ended(state: SessionState, record: LaunchRecord, outcome: str, ended: float, phases: dict[str, float],
              results: list[CheckResult]) -> dict[str, Any]:
    """What watch decides when a launch ends (replay makes the same update from the run_end event): the record
    says how and when, the checks it ran join the verifications, and no check waits any more."""
    record = cast(LaunchRecord, {**record, "outcome": outcome, "ended": ended, "phases": phases,
                                 "checks_during_load": results, "load_seconds": load_seconds(phases)})
    launches = [record if launch_["n"] == record["n"] else launch_ for launch_ in state.get("launches") or []]
    update = {"run": record, "launches": launches, "pending_checks": [],
              "verifications": [*(state.get("verifications") or []), *results]}
    return {**update, "canary_done": True} if outcome == OVERTAKEN else update


def overtaken(deps: Deps, record: LaunchRecord) -> bool:
    """A canary whose target, started beside it, has exited 0 already: the canary would save a target load that is
    over, and the target's output is judged itself. (A target that crashed first leaves the canary to go on: the
    canary still guards the launches after the repair.)"""
    folder = record.get("target_beside")
    if not folder:
        return False
    try:
        return deps.host.read_bytes(runs.Run.in_dir(folder).exit, 0, 16).strip() == b"0"
    except MedicError:  # not there yet: the target still runs
        return False


def after_the_checks(checks: BesideTheLoad) -> tuple[str, str | None] | None:
    """The launch's checks not yet run, run now (each still proves its patch); for one that failed, the outcome
    and the patch it proves."""
    while checks.pending:
        checks.start()
        done = checks.finished("after_exit", None, wait=True)
        if done is not None and not done[2] and blames_patch(done[0].kind, checks.results[-1]["detail"]):
            return f"stopped:check failed: {done[0].describe()}", done[1]
    return None


def poll(deps: Deps, handle: RunHandle, offset: int, last_status: float
         ) -> tuple[runs.LogChunk, runs.RunStatus, float]:
    """New log bytes and the run's state. Status costs a whole command over SSH: ask it once STATUS_EVERY has
    passed, and sooner only when the log is quiet and the exit file has appeared. A log that never stops (a client
    retrying a dead server prints for ever) still gets its status asked: that is where such a run is ended."""
    chunk = handle.follow(offset)
    if deps.clock() - last_status < STATUS_EVERY and (chunk.data or not handle.ended_hint()):
        return chunk, runs.RunStatus("running"), last_status
    return chunk, handle.status(), deps.clock()


def found_on_resume(deps: Deps, record: LaunchRecord, handle: RunHandle) -> None:
    """A resumed medic's first word: the launch it found, its pid, and whether it still runs (followed) or ended
    while medic was away (its log is read next) — not a bare phase line that leaves the person guessing."""
    if not deps.trace.resumed or (record.get("started") or 0.0) >= deps.trace.opened:
        return
    try:
        found = handle.status()
    except MedicError:  # the run folder went away: the watch loop says so in its own words
        return
    deps.record("reattach", "watch", {"launch": record["n"], "kind": record.get("kind") or "target",
                                      "pid": found.pid, "state": found.state, "exit_code": found.exit_code})


def environment_checks(state: SessionState, deps: Settings) -> list[Check]:
    """What the host needs for this run to finish, checked while it loads (advisory: never blamed on a patch)."""
    run = state.get("run")
    earlier = [folder for launch_ in state.get("launches") or [] if run is None or launch_["n"] != run["n"]
               for folder in run_folders(launch_)]
    return [Check("disk_free", deps.config.target.workdir, str(DISK_FREE_MB), when="during_load"),
            Check("free_memory", "host", str(FREE_MEMORY_MB), when="during_load"),
            Check("stale_runs", "session", "|".join(earlier[-5:]), when="during_load")]


def load_seconds(phases: dict[str, float]) -> float | None:
    """Seconds from launch to the end of loading (the first phase after it), the part a fix cannot save."""
    after = [phases[p] for p in LOADED_PHASES[1:] if p in phases]
    return min(after) if after else None
