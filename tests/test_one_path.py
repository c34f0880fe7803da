"""One path for every change: what the scan finds goes through repair → [approve/policy] → apply → verify like a
crash's fault does. On the real lab (pristine speculators 0.3.0 × vLLM 0.16.0), the real SQLite checkpointer.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from agent.cli.run import lab_target
from agent.config import SessionConfig
from agent.readers.replay import replay
from agent.session import run_session
from lab.build import LabPaths
from tests.fixtures_lab import GEN, WORKER


def digests(lab: LabPaths) -> dict[str, str]:
    return {rel: hashlib.sha256((lab.site_packages() / rel).read_bytes()).hexdigest() for rel in (GEN, WORKER)}


def events(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()[1:]]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    return tmp_path


def test_approve_mode_with_the_scan_on_waits_for_a_person_before_every_patch(private_lab: LabPaths,
                                                                            home: Path) -> None:
    config = SessionConfig(session_id="approve-scan", target=lab_target(private_lab.root), mode="approve",
                           traces_dir=str(home / "traces"))
    pristine = digests(private_lab)
    outcome, values = run_session(config)
    answered: list[str] = []
    while outcome == "waiting":
        proposal = values["proposal"]
        # nothing of this proposal is on disk before the answer: the files are as the last approval left them
        applied = [p["patch"]["id"] for p in values.get("patches") or []]
        assert applied == answered, "a patch was written that no person approved"
        assert proposal["patch"]["id"] not in applied
        if not answered:
            assert values["fault"]["stage"] == "scan" and digests(private_lab) == pristine
        answered.append(proposal["patch"]["id"])
        outcome, values = run_session(config, resume={"action": "approve", "by": "test"})
    assert outcome == "verified", values.get("outcome_detail")
    trace = home / "traces" / "approve-scan.jsonl"
    stages = {e["data"]["patch_id"]: e for e in events(trace) if e["kind"] == "approval"}
    scan_faults = [e for e in events(trace) if e["kind"] == "fault" and e["node"] == "scan"]
    assert len(stages) == len(answered) >= len(scan_faults) >= 5  # every scan finding with a patch waited
    assert replay(trace).first_divergence is None  # replay re-decides the scan steps like any other


def test_a_policy_deny_binds_the_scans_findings_too(private_lab: LabPaths, home: Path) -> None:
    policy = home / "rules.yaml"
    policy.write_text("rules:\n  - name: no-derived\n    action: deny\n    kind: ['derived:*', 'playbook:*']\n")
    config = SessionConfig(session_id="deny-scan", target=lab_target(private_lab.root), scan=True,
                           policy_file=str(policy), traces_dir=str(home / "traces"),
                           budgets={"max_launches": 1})  # type: ignore[arg-type]
    pristine = digests(private_lab)
    outcome, _ = run_session(config)
    assert outcome in ("no_repair", "budget")
    assert digests(private_lab) == pristine  # not one patch written
    recorded = events(home / "traces" / "deny-scan.jsonl")
    denied = [e for e in recorded if e["kind"] == "policy" and e["data"].get("action") == "reject"]
    scan_faults = [e for e in recorded if e["kind"] == "fault" and e["node"] == "scan"]
    assert scan_faults and len(denied) >= len(scan_faults) - 1  # each scan fault's candidate was asked, and denied
    assert not [e for e in recorded if e["kind"] == "applied"]
