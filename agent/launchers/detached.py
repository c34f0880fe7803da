"""The default way of running: one detached process on the job's host (tools/runs.py), ledgered before medic
goes on, so a medic that died reattaches to it and never launches it twice."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from agent.launch_records import DetachedLaunch, LaunchRecord
from agent.launchers.base import (
    Explained,
    LauncherDeps,
    LaunchPlan,
    RunHandle,
    ipc_variables,
    job_environment,
    ledger_line,
    ledgered_run,
    run_folders,
    run_with_pid,
    write_ledger,
)
from agent.launchers.beside import fingerprint, patch_ids
from agent.remedies import with_unset
from agent.repair.types import Fault
from agent.state import SessionState
from tools import runs


class DetachedHandle:
    def __init__(self, deps: LauncherDeps, record: LaunchRecord) -> None:
        self.deps, self.run = deps, runs.Run.in_dir(record["run_dir"])

    def follow(self, offset: int) -> runs.LogChunk:
        return runs.follow(self.deps.host, self.run, offset)

    def ended_hint(self) -> bool:
        return self.deps.host.exists(self.run.exit)

    def status(self) -> runs.RunStatus:
        return runs.status(self.deps.host, self.run)

    def stop(self) -> None:
        runs.stop(self.deps.host, self.run)

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str:
        record["exit_code"] = status.exit_code
        return "exited" if status.exit_code == 0 else "crashed"


class DetachedLauncher:
    def __init__(self, deps: LauncherDeps) -> None:
        self.deps = deps

    def start(self, state: SessionState, plan: LaunchPlan, env_base: dict[str, str] | None = None
              ) -> dict[str, Any]:
        deps, cfg = self.deps, self.deps.config
        base, ledger = plan.base(cfg), plan.ledger(cfg)
        record: DetachedLaunch = {**plan.fields(), "launcher": "detached"}
        env, unset = job_environment(deps, state, env_base, plan.env)
        said = fingerprint(plan.kind, plan.command, env, unset, patch_ids(state))
        earlier, beside = self.earlier(base, ledger, said)
        if beside is not None:
            record["started"] = beside  # its run began beside the canary: its time counts from then
        if earlier:  # launched before medic died, or beside the canary with nothing changed since: never twice
            record["run_dir"] = earlier
            if not deps.host.exists(ledger):  # killed between the launch and its ledger line: write it now
                write_ledger(deps.host, ledger, {"n": plan.n, "run": earlier})
            how = {"beside": True, "command": plan.command, **plan.trace_extra} if beside is not None else {
                "reattached": True}
            deps.record("launch", "launch", {"n": plan.n, "kind": plan.kind, "run_dir": earlier, **how})
        else:
            record["run_id"], record["run_dir"] = self.fresh(plan, env, unset)
            deps.record("launch", "launch", {"n": plan.n, "kind": plan.kind, "run_dir": record["run_dir"],
                                             "command": plan.command, **plan.trace_extra})
        return {"launches": [*(state.get("launches") or []), record], "run": record}

    def start_beside(self, state: SessionState, plan: LaunchPlan) -> str:
        """Start ``plan`` (the target, next after the canary now starting) without making it the session's run:
        its ledger line carries the fingerprint the next launch of its number compares (agent/launchers/beside.py).
        Its run folder, reused when a resumed launch node asks again for the same."""
        deps, cfg = self.deps, self.deps.config
        env, unset = job_environment(deps, state, None, plan.env)
        said = fingerprint(plan.kind, plan.command, env, unset, patch_ids(state))
        earlier, _ = self.earlier(plan.base(cfg), plan.ledger(cfg), said)
        return earlier or self.fresh(plan, env, unset, beside=said)[1]

    def earlier(self, base: str, ledger: str, said: str) -> tuple[str | None, float | None]:
        """(the run folder this launch number already has, when it started if it was started beside a canary).
        One started beside whose fingerprint is not ``said`` runs what is no longer wanted: stopped and forgotten."""
        host = self.deps.host
        line = ledger_line(host, ledger)  # read once: its run and whether it was started beside
        found = ledgered_run(line) or run_with_pid(host, base)
        if "beside" not in line:
            return found, None
        if found and line["beside"] == said:
            return found, float(line.get("at") or self.deps.clock())
        if found:
            runs.stop(host, runs.Run.in_dir(found))
        host.run(["rm", "-rf", ledger, base], timeout=60)  # both: a later launch of this number finds neither
        return None, None

    def fresh(self, plan: LaunchPlan, env: dict[str, str], unset: list[str], beside: str | None = None
              ) -> tuple[str, str]:
        """Start the launch and ledger it. One started beside is ledgered before it starts too (its run not yet
        known), so a medic killed in between never takes it for a launch of its own number."""
        deps, cfg = self.deps, self.deps.config
        ledger, extra = plan.ledger(cfg), {"beside": beside} if beside else {}
        deps.host.run(["mkdir", "-p", f"{cfg.host_dir}/launches"], timeout=30)
        if beside:
            write_ledger(deps.host, ledger, {"n": plan.n, "run": None, **extra})
        run = runs.launch(deps.host, with_unset(plan.command, unset), run_dir=plan.base(cfg), cwd=cfg.target.workdir,
                          env=env, ipc_vars=ipc_variables(deps))
        write_ledger(deps.host, ledger, {"n": plan.n, "run": run.dir, **extra})
        return run.id, run.dir

    def handle(self, record: LaunchRecord) -> RunHandle:
        return DetachedHandle(self.deps, record)

    def log_of(self, record: LaunchRecord) -> str:
        return f"{record['run_dir'].rstrip('/')}/log"

    def explain(self, state: SessionState, record: LaunchRecord, fault: Fault) -> Explained:
        return Explained(fault)

    def end(self, state: SessionState, spare: Collection[str] = ()) -> None:
        """No process of the session's runs may outlive it (one stopped by a failed check, one whose wrapper was
        killed from outside). Each run's wrapper reaps its own on exit; this is for the rest."""
        launches = state.get("launches") or []
        folders = [folder for launch in launches if launch["launcher"] != "slurm"  # a target started beside too
                   for folder in [*run_folders(launch), launch.get("target_beside") or ""]
                   if folder and folder not in spare]
        runs.stop_all(self.deps.host, [runs.Run.in_dir(folder) for folder in dict.fromkeys(folders)])
