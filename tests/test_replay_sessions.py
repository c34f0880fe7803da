"""Replay holds on real sessions of the kinds that broke it (issue 34, item 2): a --validate that said no (medic's
own check of the output is recorded between the verdict and its fault). The resumed sessions are replayed by
tests/test_reliability_kill.py, and every trace the suite writes by tests/fixtures_replay.py."""

from __future__ import annotations

import json

from agent.readers.replay import replay
from agent.session import run_session
from agent.session_files import save_config
from tests.fixtures_fake import MakeFake

SAYS_NO = "import sys; print('seq 0: 3 rows for 5 tokens'); sys.exit(1)"


def test_a_session_whose_validator_said_no_replays_exactly(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", session_id="says-no", canary=False, save=False,
                     args=["--output", "out.txt", "--model-dir", "model"])
    (fake.work / "model").mkdir()
    (fake.work / "model" / "config.json").write_text("{}")
    target = fake.config.target.model_copy(update={"validate_command": [str(fake.python), "-c", SAYS_NO],
                                                   "model_dir": str(fake.work / "model"), "output": "out.txt"})
    config = fake.config.model_copy(update={"target": target})
    save_config(config)
    outcome, _ = run_session(config)
    kinds = [(e["kind"], e["node"]) for e in fake.trace]
    verdict = kinds.index(("validate", "validate"))
    # the shape that diverged: the verdict, medic's own check of the same output, then the wrong output's fault
    assert kinds[verdict + 1: verdict + 3] == [("check", "validate"), ("fault", "validate")], kinds[verdict:]
    assert outcome == "no_repair"
    result = replay(fake.trace_path)
    assert result.first_divergence is None and result.exact, result
    assert result.events_compared >= 15


def test_a_watch_killed_after_its_run_end_and_watched_again_replays_exactly(make_fake: MakeFake) -> None:
    """The shape a SIGKILL between watch's run_end record and LangGraph's checkpoint of watch leaves (it landed now
    and then in test_reliability_kill.py's run_end-2): the resume, then the same launch watched again from the
    checkpoint, whose queue still holds the patch's during-load check. Made here from a real session's trace."""
    fake = make_fake(mode="unattended", session_id="watched-again", save=False)
    outcome, _ = run_session(fake.config)
    assert outcome == "verified"
    header, *lines = fake.trace_path.read_text().splitlines()
    events = [json.loads(line) for line in lines]
    last = max(i for i, e in enumerate(events) if e["kind"] == "run_end")
    launch = events[last]["data"]["launch"]
    start = max(i for i, e in enumerate(events[:last]) if e["kind"] == "checks_queued")
    assert events[start]["data"]["launch"] == launch and len(events[start]["data"]["checks"]) >= 2, events[start]
    resume = {**events[last], "kind": "resume", "node": "cli", "data": {"pid": 1}}
    again = [json.dumps(e) for e in [resume, *events[start:last + 1]]]
    killed = fake.work / "killed-after-run-end.jsonl"
    killed.write_text("\n".join([header, *lines[:last + 1], *again, *lines[last + 1:]]) + "\n")
    result = replay(killed)
    assert result.first_divergence is None and result.exact, result
    assert result.events_compared > replay(fake.trace_path).events_compared
