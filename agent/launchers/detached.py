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
    launched_before,
    run_folders,
    write_ledger,
)
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
        earlier = launched_before(deps.host, base, ledger)
        if earlier:  # launched before medic died: reattach, never launch twice
            record["run_dir"] = earlier
            if not deps.host.exists(ledger):  # killed between the launch and its ledger line: write it now
                write_ledger(deps.host, ledger, {"n": plan.n, "run": earlier})
            deps.record("launch", "launch", {"n": plan.n, "kind": plan.kind, "run_dir": earlier, "reattached": True})
        else:
            deps.host.run(["mkdir", "-p", f"{cfg.host_dir}/launches"], timeout=30)
            env, unset = job_environment(deps, state, env_base, plan.env)
            run = runs.launch(deps.host, with_unset(plan.command, unset), run_dir=base, cwd=cfg.target.workdir,
                              env=env, ipc_vars=ipc_variables(deps))
            write_ledger(deps.host, ledger, {"n": plan.n, "run": run.dir})
            record["run_id"], record["run_dir"] = run.id, run.dir
            deps.record("launch", "launch", {"n": plan.n, "kind": plan.kind, "run_dir": run.dir,
                                             "command": plan.command, **plan.trace_extra})
        return {"launches": [*(state.get("launches") or []), record], "run": record}

    def handle(self, record: LaunchRecord) -> RunHandle:
        return DetachedHandle(self.deps, record)

    def log_of(self, record: LaunchRecord) -> str:
        return f"{record['run_dir'].rstrip('/')}/log"

    def explain(self, state: SessionState, record: LaunchRecord, fault: Fault) -> Explained:
        return Explained(fault)

    def end(self, state: SessionState, spare: Collection[str] = ()) -> None:
        """No process of the session's runs may outlive it (one stopped by a failed check, one whose wrapper was
        killed from outside). Each run's wrapper reaps its own on exit; this is for the rest."""
        folders = [folder for launch in state.get("launches") or [] if launch["launcher"] != "slurm"
                   for folder in run_folders(launch) if folder not in spare]
        runs.stop_all(self.deps.host, [runs.Run.in_dir(folder) for folder in dict.fromkeys(folders)])
