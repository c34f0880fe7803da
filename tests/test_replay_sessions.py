"""Replay holds on real sessions of the kinds that broke it (issue 34, item 2): a --validate that said no (medic's
own check of the output is recorded between the verdict and its fault). The resumed sessions are replayed by
tests/test_reliability_kill.py, and every trace the suite writes by tests/fixtures_replay.py."""

from __future__ import annotations

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
