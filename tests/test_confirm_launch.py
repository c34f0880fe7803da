"""--confirm-launch: in approve mode, each relaunch waits for a person too; a refusal ends the session cleanly."""

from __future__ import annotations

from agent.readers.replay import replay
from agent.session import run_session
from tests.fixtures_fake import FIXED, MakeFake, medic_cli


def test_each_relaunch_waits_for_a_confirmation_given_from_a_fresh_process(make_fake: MakeFake) -> None:
    fake = make_fake(session_id="cl-1", mode="approve", confirm_launch=True)
    assert run_session(fake.config)[0] == "waiting"  # the patch
    patch = medic_cli("approve", "cl-1", "--yes")
    assert patch.returncode == 5, patch.stderr  # applied and verified; now the relaunch waits
    assert fake.caller.read_text() == FIXED
    listed = medic_cli("sessions")
    assert "waiting: confirm launch 2" in listed.stdout
    assert fake.kinds().count("launch") == 1  # nothing launched before the answer
    go = medic_cli("approve", "cl-1", "--yes")
    assert go.returncode == 0, go.stderr
    assert fake.kinds().count("launch") == 2
    assert [e["data"]["outcome"] for e in fake.trace if e["kind"] == "exit"] == ["verified"]
    assert replay(fake.trace_path).first_divergence is None  # the confirm step replays like any other


def test_a_refused_relaunch_ends_the_session_with_its_reason(make_fake: MakeFake) -> None:
    fake = make_fake(session_id="cl-2", mode="approve", confirm_launch=True)
    run_session(fake.config)
    assert medic_cli("approve", "cl-2", "--yes").returncode == 5
    no = medic_cli("approve", "cl-2", "--reject", "the GPU box is busy tonight")
    assert no.returncode == 7, no.stderr
    assert fake.kinds().count("launch") == 1
    exit_event = next(e["data"] for e in fake.trace if e["kind"] == "exit")
    assert exit_event["outcome"] == "rejected" and "busy tonight" in exit_event["detail"]
    assert replay(fake.trace_path).first_divergence is None
    edit = medic_cli("approve", "cl-2", "--edit")
    assert edit.returncode == 2  # the session is over: nothing waits, said in one line
