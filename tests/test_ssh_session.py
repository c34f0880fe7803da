"""A whole session over real SSH (sshd on 127.0.0.1): launch detached, follow, diagnose, patch through SFTP,
relaunch, verify — the same graph as on this machine, through the Host seam."""

from __future__ import annotations

import json

import pytest

from agent.session import run_session
from tests.fixtures_fake import FIXED, MakeFake

pytestmark = pytest.mark.ssh


def test_a_session_over_ssh_reaches_verified_output(sshd, make_fake: MakeFake,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_SSH_CONFIG", sshd.config_path)
    fake = make_fake(session_id="ssh-1", mode="unattended", host=sshd.alias, seconds=1.0)

    outcome, state = run_session(fake.config)

    assert outcome == "verified", state.get("outcome_detail")
    assert fake.caller.read_text() == FIXED
    header = json.loads(fake.trace_path.read_text().splitlines()[0])
    assert header["host"] != "local"  # every command went through paramiko
    assert fake.kinds().count("launch") == 2
    assert [e["origin"] for e in fake.events("applied")] == ["derived:unexpected_kwarg:drop"]
