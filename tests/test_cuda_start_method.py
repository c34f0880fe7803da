"""On a CUDA target the fork->spawn requirement is found by the scan, before any launch (issue 25, item 6).

torch raises "Cannot re-initialize CUDA in forked subprocess … use the 'spawn' start method" in a worker forked
after CUDA was initialized; vLLM reads its workers' start method from VLLM_WORKER_MULTIPROC_METHOD (default
fork). Both are read from the lab env's installed source; the remedy is the variable, never a patch. The CUDA
target is the job's: its torch is built with CUDA (the lab's PyPI torch is) and its target says cuda.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes.preflight import preflight
from agent.nodes.scan import scan
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from agent.repair.scan_env import environment_drift
from agent.repair.types import RepairContext
from lab.build import RUN_ENV, LabPaths
from tools.host import LocalHost
from tools.redact import Redactor

VAR = "VLLM_WORKER_MULTIPROC_METHOD"


def context(lab: LabPaths, device: str | None, job_env: dict[str, str] | None = None,
            server: tuple[str, ...] = ()) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site, str(lab.work)),
                         site_packages=(site,), workdir=str(lab.work), device=device,
                         job_env={**RUN_ENV, **(job_env or {})}, server_command=server)


def test_the_scan_reads_the_start_method_demand_of_a_cuda_target(lab: LabPaths) -> None:
    found = [f for f in environment_drift(context(lab, "cuda"), []) if f.finding and f.finding.kind == "env_choice"]
    assert [(f.finding.callee, f.finding.name) for f in found if f.finding] == [(VAR, "spawn")]
    assert found[0].frames[0].file.endswith("torch/cuda/__init__.py") and "forked subprocess" in found[0].message
    candidates = RepairEngine(playbooks=[]).candidates(context(lab, "cuda"), found[0])
    assert [e.describe() for c in candidates for e in c.patch.env] == [f"{VAR}=spawn"]
    assert all(c.patch.files == () for c in candidates)  # torch's and vLLM's checks stay as they are


def test_no_finding_where_the_job_already_spawns_or_runs_on_cpu(lab: LabPaths) -> None:
    assert not [f for f in environment_drift(context(lab, "cuda", {VAR: "spawn"}), []) if f.finding
                and f.finding.kind == "env_choice"]
    assert not [f for f in environment_drift(context(lab, None), []) if f.finding  # this machine: no GPU
                and f.finding.kind == "env_choice"]


def test_no_finding_for_a_server_started_by_the_library_cli_which_spawns_itself(lab: LabPaths) -> None:
    """vLLM's CLI sets the start method to spawn where the environment leaves it unset (its cli_env_setup, read
    in the installed source): a `vllm serve` server never forks a worker, so the scan predicts nothing (seen on
    the H200: the prediction set the variable for a server that needed nothing)."""
    def choices(**kw: Any) -> list[tuple[str, str]]:
        return [(f.finding.callee, f.finding.name) for f in environment_drift(context(lab, "cuda", **kw), [])
                if f.finding and f.finding.kind == "env_choice"]

    assert choices(server=("python", "-m", "vllm.entrypoints.cli.main", "serve", "model")) == []
    assert choices(server=("vllm", "serve", "model")) == []  # the env's console script: the same entry module
    assert choices(server=("vllm", "serve", "model"), job_env={VAR: "fork"}) == [(VAR, "spawn")]  # chosen: kept
    assert choices(server=("python", "-m", "http.server")) == [(VAR, "spawn")]  # an entry that sets nothing


def test_a_cuda_job_meets_it_in_the_scan_not_in_a_launch(lab: LabPaths, tmp_path: Path) -> None:
    target = Target(python=str(lab.python), workdir=str(lab.work), command=lab.command(), env=dict(RUN_ENV),
                    device="cuda")
    deps = Deps(host=LocalHost(), config=SessionConfig(session_id="cuda", target=target), engine=RepairEngine(),
                trace=TraceWriter(tmp_path / "t.jsonl", {"session": "cuda"}, Redactor()))
    state: dict[str, Any] = {}
    state.update(preflight(state, deps))  # type: ignore[arg-type]
    update = scan(state, deps)  # type: ignore[arg-type]
    fault = update.get("fault") or {}
    assert (fault.get("finding") or {}).get("kind") == "env_choice", fault
    assert fault["stage"] == "scan" and fault.get("launch") is None and not state.get("launches")
