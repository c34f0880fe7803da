"""The lab's own console script typed as a user would: ``vllm --version`` with ``--python`` naming the lab's
venv (not activated) and a decoy ``vllm`` first on the PATH, from a job folder outside the repository. The
session runs the lab's script — the trace's launch names it and its log says the installed vLLM's version — never
the decoy (tests/test_env_scripts.py covers the same on a tiny env, over SSH, and the not-found fault)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.config import SessionConfig, Target
from agent.session import run_session
from lab.build import RUN_ENV, LabPaths

pytestmark = pytest.mark.lab


def test_the_labs_vllm_script_runs_not_the_decoy_on_path(lab: LabPaths, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    (decoys / "vllm").write_text("#!/bin/sh\necho \"DECOY $0\"\nexit 3\n")
    (decoys / "vllm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{decoys}:{os.environ['PATH']}")
    job = tmp_path / "job"
    job.mkdir()
    python = str(lab.python)
    target = Target(python=python, workdir=str(job), command=["vllm", "--version"], env=dict(RUN_ENV),
                    validate_command=["python", "-c", "import sys; assert sys.prefix != sys.base_prefix"])
    config = SessionConfig(session_id="lab-script", target=target, mode="unattended", scan=False, canary=False,
                           traces_dir=str(tmp_path / "traces"))
    outcome, state = run_session(config)
    assert outcome == "verified", state.get("outcome_detail")
    script = str(Path(python).parent / "vllm")
    installed = state["preflight"]["versions"]["vllm"]  # the env's vLLM as medic's own probe read it
    launch = state["launches"][0]
    log = (Path(launch["run_dir"]) / "log").read_text()
    assert "DECOY" not in log and installed in log.split(), log[-2000:]
    trace = (tmp_path / "traces" / "lab-script.jsonl").read_text()
    assert f'"ran": "{script}"' in trace and '"given": "vllm"' in trace
