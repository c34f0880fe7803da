"""The fast tier: the launch, watch, diagnose and validate nodes and their routers over a ScriptedLauncher and a
FunctionHost — no process starts, so each test takes milliseconds. The same paths are exercised for real (real
runs, the real lab, real sshd, real Slurm, real servers) by the other tests; these pin the nodes' decisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.graph import after_diagnose, after_validate, after_watch
from agent.launchers.base import LauncherDeps, LaunchPlan
from agent.launchers.scripted import ScriptedLauncher, ScriptedRun
from agent.nodes.diagnose import diagnose
from agent.nodes.launch import launch
from agent.nodes.validate import validate
from agent.nodes.watch import watch
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from agent.state import SessionState
from tools.host import CommandResult, FunctionHost
from tools.redact import Redactor

LOGS = Path(__file__).parent / "data" / "logs"
WORK = "/job"


def deps_with(tmp_path: Path, runs: list[ScriptedRun], answer: dict[str, CommandResult] | None = None,
              **target: Any) -> tuple[Deps, FunctionHost]:
    """Deps over a FunctionHost whose commands get ``answer[first word]`` (else exit 0, no output), and a
    ScriptedLauncher that answers launches with ``runs`` in order."""
    def respond(line: str) -> CommandResult:
        return next((result for word, result in (answer or {}).items() if word in line),
                    CommandResult(0, "", "", 0.0))

    host = FunctionHost(respond)
    config = SessionConfig(session_id="fast", target=Target(python="/env/bin/python", workdir=WORK,
                                                            command=["python", "extract.py"], **target),
                           traces_dir=str(tmp_path), canary=False)
    queue = list(runs)

    def scripted(deps: LauncherDeps) -> ScriptedLauncher:
        return ScriptedLauncher(deps, lambda plan: queue.pop(0))

    trace = TraceWriter(tmp_path / "fast.jsonl", {"session": "fast"}, Redactor())
    deps = Deps(host=host, config=config, engine=RepairEngine(playbooks=[]), trace=trace,
                launcher_factory=scripted, poll_interval=0.0)
    return deps, host


def step(state: SessionState, update: dict[str, Any]) -> SessionState:
    merged: SessionState = {**state, **update}  # type: ignore[typeddict-item]
    return merged


def test_a_scripted_crash_is_watched_and_its_worker_root_cause_diagnosed(tmp_path: Path) -> None:
    log = (LOGS / "synthetic_worker_logged.log").read_bytes()
    expected = json.loads((LOGS / "synthetic_worker_logged.expected.json").read_text())
    deps, _ = deps_with(tmp_path, [ScriptedRun(log, exit_code=1)])
    state: SessionState = {"launches": [], "faults": [], "patches": [], "preflight": {}}
    state = step(state, launch(state, deps))
    assert state["run"] and state["run"]["kind"] == "target" and state["run"]["n"] == 1
    state = step(state, watch(state, deps))
    assert state["run"]["outcome"] == "crashed" and state["run"]["exit_code"] == 1
    assert after_watch(state) == "diagnose"
    state = step(state, diagnose(state, deps))
    fault = state["fault"] or {}
    assert fault["exc_type"] == expected["exc_type"] and expected["message_contains"] in fault["message"]
    assert state["faults"][-1]["launch"] == 1
    assert after_diagnose(state) == "repair"


def test_the_same_fault_after_a_patch_routes_to_revert(tmp_path: Path) -> None:
    log = (LOGS / "synthetic_chained.log").read_bytes()
    deps, _ = deps_with(tmp_path, [ScriptedRun(log, 1), ScriptedRun(log, 1)])
    state: SessionState = {"launches": [], "faults": [], "patches": [], "preflight": {}}
    for _ in range(2):
        state = step(state, launch(state, deps))
        state = step(state, watch(state, deps))
        state = step(state, diagnose(state, deps))
        state["patches"] = [{"patch": {"id": "p1"}, "origin": "derived:x", "rationale": "", "evidence": [],
                             "checks": []}]
    assert [f["repeated"] for f in state["faults"]] == [False, True]
    assert after_diagnose(state) == "revert"


def test_an_exit_0_whose_validator_says_no_is_a_fault_with_the_failing_lines(tmp_path: Path) -> None:
    verdict = CommandResult(1, "sequence 0 ok\nsequence 1 ok\nsequence 2: layer 3 off by 0.8 (tolerance 0.01)\n",
                            "", 0.0)
    deps, host = deps_with(tmp_path, [ScriptedRun(b"extracting\ndone\n", 0)], {"verify.py": verdict},
                           validate_command=["python", "verify.py"])
    state: SessionState = {"launches": [], "faults": [], "patches": [], "preflight": {}}
    state = step(state, launch(state, deps))
    state = step(state, watch(state, deps))
    assert after_watch(state) == "validate"
    state = step(state, validate(state, deps))
    assert state.get("outcome") is None and after_validate(state) == "repair"
    fault = state["fault"] or {}
    assert fault["exc_type"] == "OutputMismatch" and "layer 3 off by 0.8" in fault["message"]
    assert any("/env/bin/python verify.py" in line for line in host.commands)  # `python` is the target's


def test_a_validator_that_says_yes_ends_the_session_verified(tmp_path: Path) -> None:
    deps, _ = deps_with(tmp_path, [ScriptedRun(b"done\n", 0)], {"verify.py": CommandResult(0, "all ok\n", "", 0.0)},
                        validate_command=["python", "verify.py"])
    state: SessionState = {"launches": [], "faults": [], "patches": [], "preflight": {}}
    state = step(state, launch(state, deps))
    state = step(state, watch(state, deps))
    state = step(state, validate(state, deps))
    assert state["outcome"] == "verified" and after_validate(state) == "report"


def test_the_launcher_is_given_the_plan_the_launch_node_made(tmp_path: Path) -> None:
    """`python` at the head is the target's python, and the plan says so for the trace."""
    deps, _ = deps_with(tmp_path, [ScriptedRun(b"", 0)])
    launch({"launches": [], "patches": []}, deps)
    launcher = deps.launcher
    assert isinstance(launcher, ScriptedLauncher)
    plan: LaunchPlan = launcher.plans[0]
    assert plan.command == ["/env/bin/python", "extract.py"] and plan.kind == "target"
    assert plan.trace_extra == {"interpreter": {"given": "python", "ran": "/env/bin/python"}}
