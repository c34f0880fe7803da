"""A launcher backed by a function, as tools/host.py's FunctionHost is a host backed by one: each launch's log,
exit code and output files are what ``script(plan)`` answers, written through the host at once. No process runs.

For the fast tier of tests (watch, diagnose, validate and the routers over scripted runs) and for trying a
node against a recorded log. Anything that must be real (a run, a reattach, Slurm, a server) is tested against
the real launchers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.launch_records import DetachedLaunch, LaunchRecord
from agent.launchers.base import Explained, LauncherDeps, LaunchPlan, RunHandle
from agent.repair.types import Fault
from agent.state import SessionState
from tools import runs


@dataclass(frozen=True)
class ScriptedRun:
    log: bytes
    exit_code: int = 0
    writes: Mapping[str, bytes] = field(default_factory=dict)  # path on the host -> bytes the run leaves there


class ScriptedHandle:
    def __init__(self, deps: LauncherDeps, record: LaunchRecord, exit_code: int) -> None:
        self.deps, self.run, self.exit_code = deps, runs.Run.in_dir(record["run_dir"]), exit_code

    def follow(self, offset: int) -> runs.LogChunk:
        return runs.follow(self.deps.host, self.run, offset)

    def ended_hint(self) -> bool:
        return True

    def status(self) -> runs.RunStatus:
        return runs.RunStatus("exited", self.exit_code)

    def stop(self) -> None:
        return None

    def finish(self, record: LaunchRecord, status: runs.RunStatus) -> str:
        record["exit_code"] = status.exit_code
        return "exited" if status.exit_code == 0 else "crashed"


class ScriptedLauncher:
    def __init__(self, deps: LauncherDeps, script: Callable[[LaunchPlan], ScriptedRun]) -> None:
        self.deps, self.script = deps, script
        self.plans: list[LaunchPlan] = []
        self.exit_codes: dict[str, int] = {}  # run folder -> its scripted exit code

    def start(self, state: SessionState, plan: LaunchPlan, env_base: dict[str, str] | None = None
              ) -> dict[str, Any]:
        self.plans.append(plan)
        answer = self.script(plan)
        folder = f"{plan.base(self.deps.config)}/scripted"
        run = runs.Run.in_dir(folder)
        self.deps.host.write_bytes_atomic(run.log, answer.log)
        for path, data in answer.writes.items():
            self.deps.host.write_bytes_atomic(path, data)
        self.exit_codes[folder] = answer.exit_code
        record: DetachedLaunch = {**plan.fields(), "launcher": "detached", "run_id": run.id, "run_dir": folder}
        self.deps.record("launch", "launch", {"n": plan.n, "kind": plan.kind, "run_dir": folder,
                                              "command": plan.command, **plan.trace_extra})
        return {"launches": [*(state.get("launches") or []), record], "run": record}

    def handle(self, record: LaunchRecord) -> RunHandle:
        return ScriptedHandle(self.deps, record, self.exit_codes.get(record["run_dir"], 0))

    def log_of(self, record: LaunchRecord) -> str:
        return runs.Run.in_dir(record["run_dir"]).log

    def explain(self, state: SessionState, record: LaunchRecord, fault: Fault) -> Explained:
        return Explained(fault)

    def end(self, state: SessionState, spare: Collection[str] = ()) -> None:
        return None
