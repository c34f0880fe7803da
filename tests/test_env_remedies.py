"""Environment faults: what the library's own checks demand of the job's environment, read from the installed
source — vLLM 0.18.1's CPU worker (a real variant lab) raises unless LD_PRELOAD names libtcmalloc and libiomp;
torch raises in a forked worker and asks for the 'spawn' start method, a choice vLLM reads from its envs.
The cure is the job's environment (and a host package only a person installs), never a patch to the check.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from agent.cli.run import lab_target
from agent.config import SessionConfig, Target
from agent.nodes.diagnose import fault_from_log
from agent.readers.replay import replay
from agent.remedies import job_env
from agent.repair.derived_env import environment_remedy, find_library
from agent.repair.edits import Source
from agent.repair.engine import RepairEngine
from agent.repair.env_checks import bind_message, env_checks
from agent.repair.scan_env import environment_drift
from agent.repair.types import Fault, FrameRef, RepairContext
from agent.session import run_session
from lab.build import LabBuilder, LabPaths
from tools.diffs import EnvEdit
from tools.host import LocalHost

DATA = Path(__file__).parent / "data" / "env_logs"
CPU_WORKER = "vllm/v1/worker/cpu_worker.py"


def context(lab: LabPaths) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site, str(lab.work)),
                         site_packages=(site,), workdir=str(lab.work))


def test_the_cpu_workers_check_is_read_from_the_installed_source(lab_0181: LabPaths, lab: LabPaths) -> None:
    path = lab_0181.site_packages() / CPU_WORKER
    checks = env_checks(Source(str(path), path.read_text()))
    assert {(c.var, c.required) for c in checks} == {("LD_PRELOAD", "libtcmalloc"), ("LD_PRELOAD", "libiomp")}
    raised = "libtcmalloc is not found in LD_PRELOAD. Please follow the section `set LD_PRELOAD` in …"
    assert bind_message(checks[0].template, raised) == ["libtcmalloc"]
    # vLLM 0.16.0 has no such raise: nothing to find there (no false finding on the default lab)
    old = lab.site_packages() / CPU_WORKER
    assert env_checks(Source(str(old), old.read_text())) == []


def test_the_runtime_library_is_told_from_its_look_alikes(lab_0181: LabPaths) -> None:
    found = find_library(context(lab_0181), "libiomp")
    assert found is not None and Path(found).name == "libiomp5.so"  # not libiomp5_db.so, not libiompstubs5.so


def test_a_raised_check_is_cured_by_the_environment_not_by_a_patch(lab_0181: LabPaths) -> None:
    log = (DATA / "worker_ld_preload_vllm_0.18.1.log").read_text().replace("{LAB}", str(lab_0181.root))
    fault = fault_from_log(log.encode())
    assert fault.exc_type == "RuntimeError" and "libtcmalloc" in fault.message
    found = RepairEngine().candidates(context(lab_0181), fault)
    assert found, "no remedy for the LD_PRELOAD check"
    patch = found[0].patch
    assert patch.files == ()  # vLLM's check is left alone
    assert [(e.var, e.action) for e in patch.env] == [("LD_PRELOAD", "prepend")]
    ldconfig = subprocess.run(["sh", "-c", "ldconfig -p | grep -F /libtcmalloc"], capture_output=True, text=True)
    if ldconfig.stdout.strip():  # the host has it: the remedy names the file, no host step
        assert "libtcmalloc" in Path(patch.env[0].value).name and not patch.host_steps
    else:  # a package only a person installs, named by the host's own apt-cache
        assert patch.host_steps and re.fullmatch(r"apt-get install -y libtcmalloc[\w.+-]*", patch.host_steps[0])
        assert patch.env[0].library == "libtcmalloc" and not patch.env[0].value


def test_a_message_asking_for_a_choice_sets_the_variable_the_library_reads(lab: LabPaths) -> None:
    torch_cuda = lab.site_packages() / "torch" / "cuda" / "__init__.py"
    tree = ast.parse(torch_cuda.read_text())
    raise_node = next(n for n in ast.walk(tree) if isinstance(n, ast.Raise) and "forked subprocess" in ast.unparse(n))
    message = ast.literal_eval(raise_node.exc.args[0])  # type: ignore[union-attr]
    fault = Fault("crash", "RuntimeError", message, (FrameRef(str(torch_cuda), raise_node.lineno, "_lazy_init"),))
    found = environment_remedy(context(lab), fault)
    assert [e.describe() for c in found for e in c.patch.env] == ["VLLM_WORKER_MULTIPROC_METHOD=spawn"]
    assert all(c.patch.files == () for c in found)


def test_the_scan_finds_the_environment_fault_before_any_launch(lab_0181: LabPaths) -> None:
    ctx = context(lab_0181)
    ctx.job_env = {"LD_PRELOAD": ""}
    assert {f.finding.name for f in environment_drift(ctx, []) if f.finding} == {"libtcmalloc", "libiomp"}
    ctx.memo.clear()
    iomp = find_library(ctx, "libiomp")
    ctx.job_env = {"LD_PRELOAD": f"/opt/libtcmalloc_minimal.so.4:{iomp}"}
    assert environment_drift(ctx, []) == []


def test_prepend_keeps_what_the_variable_holds_and_unset_removes_it() -> None:
    env, unset = job_env(LocalHost(), {"LD_PRELOAD": "/a.so", "X": "1"},
                         [EnvEdit(var="LD_PRELOAD", action="prepend", value="/b.so"),
                          EnvEdit(var="X", action="unset")])
    assert env == {"LD_PRELOAD": "/b.so:/a.so"} and unset == ["X"]


def test_an_unattended_session_on_vllm_0_18_1_reaches_verified_output(lab_0181: LabPaths, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """From pristine speculators on the pair whose worker demands LD_PRELOAD: both environment faults found
    before any launch; a missing host library stops the session for a person, then `resume` goes on."""
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    if os.environ.get("CI") and os.geteuid() == 0:  # CI's machine is ours: start without the library, so the
        # host-step path (stop, a person installs, resume) runs every time, not only on a fresh machine
        subprocess.run(["apt-get", "remove", "-y", "-qq", "libtcmalloc-minimal4"], capture_output=True, timeout=300)
    root = tmp_path / "lab"
    subprocess.run(["cp", "-al", str(lab_0181.root), str(root)], check=True, timeout=300)
    LabBuilder(LabPaths(root)).reset()
    config = SessionConfig(session_id="env-0181", target=lab_target(root), traces_dir=str(tmp_path / "traces"))
    outcome, values = run_session(config)
    if outcome == "host_change":  # the person runs the one step medic named, then resumes
        steps = values["proposal"]["patch"]["host_steps"]
        for step in steps:
            assert subprocess.run(step, shell=True, capture_output=True, timeout=900).returncode == 0, step
        outcome, values = run_session(config, resume={"action": "approve", "by": "test"})
    assert outcome == "verified", values.get("outcome_detail")
    kept_env = [e for p in values["patches"] for e in p["patch"].get("env") or []]
    assert {Path(e["value"]).name.split(".")[0] for e in kept_env} >= {"libiomp5"}
    assert any("libtcmalloc" in e["value"] for e in kept_env)
    trace = tmp_path / "traces" / "env-0181.jsonl"
    recorded = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    scan_env = [e for e in recorded if e["kind"] == "fault" and e["node"] == "scan" and e["data"].get("finding")
                == "environment"]
    assert len(scan_env) == 2  # found before any launch: no launch was spent on them
    assert not [e for e in recorded if e["kind"] == "fault" and "LD_PRELOAD" in e["data"].get("summary", "")
                and e["node"] != "scan"]
    report = (tmp_path / "home" / "sessions" / "env-0181" / "report.md").read_text()
    assert "## Run your job with" in report and "export LD_PRELOAD=" in report
    assert replay(trace).first_divergence is None


def test_an_env_remedy_whose_fault_came_back_is_reverted_by_dropping_it(tmp_path: Path) -> None:
    from agent.deps import Deps
    from agent.nodes.patching import revert
    from agent.record.trace import TraceWriter
    from tools.diffs import env_patch
    from tools.redact import Redactor

    config = SessionConfig(session_id="env-revert", target=lab_target_free(tmp_path))
    deps = Deps(host=LocalHost(), config=config, engine=RepairEngine(playbooks=[]),
                trace=TraceWriter(tmp_path / "t.jsonl", {"session": "env-revert"}, Redactor()))
    patch = env_patch((EnvEdit(var="VLLM_WORKER_MULTIPROC_METHOD", action="set", value="spawn"),),
                      rationale="the error asks for 'spawn'", origin="derived:env:library_choice")
    state = {"patches": [{"patch": patch.model_dump(mode="json"), "origin": patch.origin}], "tried": []}
    update = revert(state, deps)  # type: ignore[arg-type]
    assert update["patches"] == [] and update["tried"] == [patch.id]
    assert job_env(LocalHost(), {}, [])[0] == {}  # and the next launch runs without it


def lab_target_free(tmp_path: Path) -> Target:
    return Target(python="/usr/bin/python3", workdir=str(tmp_path), command=["true"])


def test_a_two_rank_fault_takes_the_librarys_other_branch(lab: LabPaths) -> None:
    """Recorded here: the lab's driver with tensor_parallel_size=2 on this one-NUMA-node machine. Rank 0's CPU
    worker asserts while auto-binding threads per NUMA node (``VLLM_CPU_OMP_THREADS_BIND`` is ``auto``); the
    same if/elif chain of vLLM's worker takes another way for ``nobind`` — the remedy is that value, read from
    the installed code, not the message; a job that already sets the variable gets nothing."""
    log = (DATA / "tp2_numa_bind_vllm_0.16.0.log").read_text().replace("{LAB}", str(lab.root))
    fault = fault_from_log(log.replace("{JOB}", str(lab.work)).encode())
    assert fault.exc_type == "AssertionError" and "NUMA" in fault.message
    found = environment_remedy(context(lab), fault)
    assert [e.describe() for c in found for e in c.patch.env] == ["VLLM_CPU_OMP_THREADS_BIND=nobind"]
    assert all(c.patch.files == () for c in found) and "cpu_worker.py" in found[0].evidence[0]
    ctx = context(lab)
    ctx.job_env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}  # the person chose a binding: not medic's to change
    assert environment_remedy(ctx, fault) == []
