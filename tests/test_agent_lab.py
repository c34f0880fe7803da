"""The product's promise on the real lab: pristine speculators 0.3.0 on vLLM 0.16.0 -> verified output,
unattended, with no LLM; then a second session on the fixed lab launches once and changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.build import LabPaths

pytestmark = pytest.mark.lab

MEDIC = [sys.executable, "-c", "from agent.cli.main import main; main()"]
# the cascade with the scan: seven faults the static scan finds before any launch, then one only a run shows
SCANNED = [
    ("TypeError", "unexpected keyword argument 'kv_cache_specs'"),
    ("TypeError", "required positional argument: 'block_size'"),
    ("TypeError", "SchedulerConfig() missing 1 required positional argument: 'is_encoder_decoder'"),
    ("RuntimeError", "sample_tokens() must be called"),
    ("ReturnShapeDrift", "collective_rpc(unique_reply_rank=...)"),
    ("RuntimeError", "NVIDIA driver"),
    ("AttributeError", "get_input_embeddings"),
]
CRASHED = [("AssertionError", "")]
# the same cascade as the runs show it without the scan, in the order they reach each fault
AT_RUN_TIME = [
    ("ValidationError", "SchedulerConfig"),
    ("RuntimeError", "NVIDIA driver"),
    ("TypeError", "unexpected keyword argument 'kv_cache_specs'"),
    ("TypeError", "missing 1 required positional argument: 'block_size'"),
    ("AttributeError", "get_input_embeddings"),
    ("AssertionError", ""),
    ("RuntimeError", "Boolean value of Tensor"),
    ("RuntimeError", "sample_tokens() must be called"),
]
MODES = {"scan": ([], SCANNED, CRASHED, 0), "no-scan": (["--no-scan"], [], AT_RUN_TIME, 2)}


def medic(args: list[str], home: Path, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEDIC_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([*MEDIC, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def events(trace: Path) -> list[dict]:
    lines = trace.read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


def speculators_digest(lab: LabPaths) -> dict[str, str]:
    root = lab.site_packages() / "speculators"
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.py"))}


@pytest.mark.parametrize("mode", list(MODES))
def test_pristine_lab_to_verified_output_then_a_second_run_changes_nothing(
    pristine_lab: LabPaths, tmp_path: Path, mode: str
):
    """With the scan, the lab needs two launches; without it, every fault costs one (worker tracebacks too)."""
    lab = pristine_lab
    traces = tmp_path / "traces"
    flags, scanned, crashed, from_workers = MODES[mode]
    cascade = scanned + crashed
    try:
        first = medic(["run", "--session", "e2e-1", "--traces", str(traces), "--lab", str(lab.root), *flags],
                      tmp_path)
        assert first.returncode == 0, first.stderr[-3000:]

        check = medic(["lab", "check", str(lab.output), "--path", str(lab.root)], tmp_path, timeout=600)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "VERIFIED" in check.stdout

        trace = events(traces / "e2e-1.jsonl")
        faults = [e["data"] for e in trace if e["kind"] == "fault"]
        assert len(faults) == len(cascade), [f["summary"] for f in faults]
        for fault, (exc_type, piece) in zip(faults, cascade, strict=True):
            assert exc_type in fault["summary"] and piece in fault["summary"], fault["summary"]
        assert [f["stage"] for f in faults] == ["scan"] * len(scanned) + ["crash"] * len(crashed)
        launches = [e["data"] for e in trace if e["kind"] == "launch"]
        assert len(launches) == len(crashed) + 1  # one launch per fault only a run can show, then the good one
        worker_faults = [f for f in faults if (f.get("proc") or "").startswith("Worker")]
        assert len(worker_faults) == from_workers  # root causes only a worker process printed
        applied = [e["data"] for e in trace if e["kind"] == "applied"]
        assert len(applied) == len(cascade)
        origins = {a["origin"].split(":")[0] + ":" + a["origin"].split(":")[1] for a in applied}
        assert {"derived:unexpected_kwarg", "derived:missing_argument", "derived:renamed_member",
                "derived:changed_return_shape", "derived:protocol_step", "playbook:cuda-memory-query-off-cuda",
                "playbook:prefix-caching-breaks-extraction"} <= origins
        # the misleading faults were fixed where the cause is, not where they raised
        diffs = "\n".join(a["diff"] for a in applied)
        assert "-        aux_hidden_states = captured_states_list[0]" in diffs
        assert "enable_prefix_caching=False" in diffs
        assert "if not aux_hidden_states:" not in "\n".join(
            line for line in diffs.splitlines() if line.startswith(("+", "-")))
        exit_event = trace[-1]
        assert exit_event["kind"] == "exit" and exit_event["data"]["outcome"] == "verified"

        report = (tmp_path / "sessions" / "e2e-1" / "report.md").read_text()
        assert "Outcome: verified" in report
        assert report.count("### ") == len(cascade)  # one section per patch, each with its diff

        fixed = speculators_digest(lab)
        second = medic(["run", "--session", "e2e-2", "--traces", str(traces), "--lab", str(lab.root)], tmp_path)
        assert second.returncode == 0, second.stderr[-3000:]
        again = events(traces / "e2e-2.jsonl")
        assert [e["kind"] for e in again].count("launch") == 1
        assert not [e for e in again if e["kind"] in ("fault", "applied")]
        assert speculators_digest(lab) == fixed
    finally:
        medic(["lab", "reset", "--path", str(lab.root)], tmp_path, timeout=600)


def test_revert_undoes_every_patch_of_a_session_byte_for_byte(pristine_lab: LabPaths, tmp_path: Path):
    """A session stopped by its budget keeps its patches (the scan's and the first crash's); `medic revert`
    puts every file back."""
    lab = pristine_lab
    before = speculators_digest(lab)
    try:
        run = medic(["run", "--session", "rv", "--traces", str(tmp_path), "--lab", str(lab.root),
                     "--max-launches", "1"], tmp_path)
        assert run.returncode == 3, run.stderr[-2000:]  # budget spent
        assert speculators_digest(lab) != before
        undo = medic(["revert", "rv"], tmp_path)
        assert undo.returncode == 0, undo.stderr
        assert speculators_digest(lab) == before
    finally:
        medic(["lab", "reset", "--path", str(lab.root)], tmp_path, timeout=600)
