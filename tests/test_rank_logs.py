"""One log per shard (or rank), several of them failed: the lowest shard only says "see above" (it was torn down
because another one died), the other has the fault's own traceback. diagnose reads the log that explains it, so
the one repair fixes the real fault, detached or under Slurm (the real one-node cluster)."""

from __future__ import annotations

import pytest

from agent.scheduler import ShardSettings, SlurmSettings
from agent.session import run_session
from tests.fixtures_fake import MakeFake

WRAPPER = ("Traceback (most recent call last):", '  File "/work/driver.py", line 3, in <module>',
           "RuntimeError: Worker failed with error 'peer closed', please check the stack trace above for the cause")


@pytest.mark.parametrize("scheduler", ["detached", "slurm"])
def test_the_failed_shard_whose_log_explains_it_is_diagnosed(scheduler: str, make_fake: MakeFake,
                                                             request: pytest.FixtureRequest) -> None:
    if scheduler == "slurm":
        request.getfixturevalue("slurm_cluster")
        sharding = {"slurm": SlurmSettings(shards=2, lead_shard=False)}
    else:
        sharding = {"shards": ShardSettings(shards=2, lead_shard=False)}
    fake = make_fake(mode="unattended", **sharding)
    py, lines = fake.python, " ".join(f"'{line}'" if "'" not in line else f'"{line}"' for line in WRAPPER)
    # shard 0 meets the same drift but hides it behind a wrapper, a second after shard 1 crashed on it
    command = ["sh", "-c", f'if [ "$MEDIC_SHARD" = 0 ]; then {py} -c "import fakecaller; fakecaller.run(1)" '
                           f">/dev/null 2>&1 || {{ sleep 1; printf '%s\\n' {lines} >&2; exit 1; }}; "
                           f"printf 1:a > out.txt; else exec {py} driver.py; fi"]
    config = fake.config.model_copy(update={"target": fake.config.target.model_copy(update={"command": command})})
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    first = values["launches"][0]
    assert first["outcome"] == "crashed" and first["shard_states"] == {"0": "FAILED", "1": "FAILED"}
    assert first["failed_shard"] == 1  # not the lowest: the one whose log has the fault's own traceback
    fault = values["faults"][0]
    assert fault["exc_type"] == "TypeError" and "legacy" in fault["message"]
    assert len(values["patches"]) == 1 and [launch["outcome"] for launch in values["launches"]] == ["crashed",
                                                                                                    "exited"]
