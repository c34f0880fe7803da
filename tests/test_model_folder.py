"""The scan and the canary find the model folder however COMMAND names it (issue 25, item 7): a bare relative
name, ``--model=x``, the default of an option the driver's own argparse defines, a variable of ``--env``.
Today's scan saw only an argument with a '/', so ``python x.py tiny out.pt`` hid the model's architecture from
the grafted-member rule and cost a launch. On the real lab: its tiny Llama and its env's python.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.job import canary_ready, job_model_folder
from agent.nodes.preflight import derive_canary
from agent.nodes.scan import target_architectures
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from lab.build import RUN_ENV, LabPaths
from tools.host import LocalHost
from tools.model_folder import architectures, argparse_defaults
from tools.redact import Redactor

POSITIONAL = '''import argparse, sys
parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("out")
print(parser.parse_args(sys.argv[1:]))
'''
WITH_DEFAULT = '''import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--out", default="out.pt")
parser.add_argument("--checkpoint", default="tiny")
print(parser.parse_args())
'''


@pytest.fixture(scope="module")
def workdir(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job folder holding the lab's tiny model as ``tiny`` (a copy: the lab's stays untouched)."""
    work = tmp_path_factory.mktemp("job")
    shutil.copytree(lab.model(), work / "tiny")
    (work / "x.py").write_text(POSITIONAL)
    (work / "y.py").write_text(WITH_DEFAULT)
    return work


def target(lab: LabPaths, work: Path, command: list[str], env: dict[str, str] | None = None,
           model_dir: str | None = None) -> Target:
    return Target(python=str(lab.python), workdir=str(work), command=command, env={**RUN_ENV, **(env or {})},
                  model_dir=model_dir)


NAMINGS = {
    "bare relative name": (["python", "x.py", "tiny", "out.pt"], {}),
    "--model=x": (["python", "extract.py", "--model=tiny", "--out", "out.pt"], {}),
    "the driver's own option default": (["python", "y.py", "--out", "o.pt"], {}),
    "a path from --env": (["python", "extract.py", "--out", "out.pt"], {"MODEL_DIR": "tiny"}),
}


@pytest.mark.parametrize("naming", list(NAMINGS))
def test_the_scan_reads_the_architecture_however_the_model_is_named(lab: LabPaths, workdir: Path, tmp_path: Path,
                                                                     naming: str) -> None:
    command, env = NAMINGS[naming]
    config = SessionConfig(session_id="scan", target=target(lab, workdir, command, env))
    assert target_architectures(deps_for(config, tmp_path), {}) == ("LlamaForCausalLM",)  # what the scan reads
    folder = job_model_folder(config.target, LocalHost())
    assert folder is not None and folder.path == str(workdir / "tiny"), folder


def test_nothing_that_is_not_a_model_folder_is_taken_for_one(lab: LabPaths, workdir: Path) -> None:
    """The output, the driver and the workdir itself (no config.json there) are not models."""
    assert job_model_folder(target(lab, workdir, ["python", "x.py", ".", "out.pt"]), LocalHost()) is None
    assert argparse_defaults(WITH_DEFAULT) == {"--out": "out.pt", "--checkpoint": "tiny"}


def deps_for(config: SessionConfig, tmp_path: Path) -> Deps:
    return Deps(host=LocalHost(), config=config, engine=RepairEngine(playbooks=[]),
                trace=TraceWriter(tmp_path / "t.jsonl", {"session": config.session_id}, Redactor()))


@pytest.mark.parametrize("naming", ["bare relative name", "the driver's own option default", "a path from --env"])
def test_the_canary_takes_the_models_place_wherever_the_job_names_it(lab: LabPaths, workdir: Path, tmp_path: Path,
                                                                     naming: str) -> None:
    """--canary-model as the command names it (``tiny``, relative to the workdir, not to medic's cwd): the canary
    is built from it in the target env, and its run names the canary where the job named the model."""
    command, env = NAMINGS[naming]
    config = SessionConfig(session_id=f"canary-{naming.split()[-1]}",
                           target=target(lab, workdir, command, env, model_dir="tiny"))
    deps = deps_for(config, tmp_path)
    derived = derive_canary(deps)
    assert derived is not None
    canary_ready(deps)  # built in the background while the scan would run
    canary = str(workdir / ".medic" / "canary" / "tiny")
    assert architectures(LocalHost(), canary) == ("LlamaForCausalLM",)
    run = config.target.model_copy(update={"command": derived["command"],
                                           "env": {**config.target.env, **derived["env"]}, "model_dir": None})
    found = job_model_folder(run, LocalHost())
    assert found is not None and found.path == canary, (derived, found)  # the canary, never the model
