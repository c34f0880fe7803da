"""Shards as detached runs on the job's host (``medic run --shards N``, no Slurm): the lead shard finds the fault,
one repair serves every shard, a verified shard never runs again, only the shards that did not finish run again,
and medic SIGKILLed while its shards run resumes onto those same runs (never a second start of one)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from agent.cli.run import lab_target
from agent.config import SessionConfig
from agent.nodes.launch import launch
from agent.readers.postmortem import postmortem_markdown
from agent.readers.replay import replay
from agent.readers.tracefile import read_trace
from agent.scheduler import ShardSettings
from agent.session import make_deps, run_session
from lab.build import LabPaths
from tests.fixtures_fake import Fake, MakeFake, medic_cli, spawn_medic
from tests.fixtures_lab import cache_config_hidden_from_the_scan
from tests.fixtures_ssh import SSHServer
from tools import runs


def shard_runs(fake: Fake, n: int) -> dict[int, list[Path]]:
    """Launch n's run folders per shard (a shard started twice would show two)."""
    found: dict[int, list[Path]] = {}
    for pid in sorted((fake.host_dir / "runs" / f"L{n}").glob("s*/*/pid")):
        found.setdefault(int(pid.parent.parent.name[1:]), []).append(pid.parent)
    return found


def test_one_repair_for_all_shard_runs_and_a_verified_shard_never_runs_again(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", args=["--shard", "{shard}"], shards=ShardSettings(shards=3))
    outcome, values = run_session(fake.config)
    assert outcome == "verified", values.get("outcome_detail")
    assert len(values["patches"]) == 1  # the drift, repaired once, not once per shard
    ran = [(launch["outcome"], launch["shards"]) for launch in values["launches"]]
    assert ran == [("crashed", [0]), ("exited", [0]), ("exited", [1, 2])]
    assert values["verified_shards"] == [0, 1, 2]
    assert all(launch["launcher"] == "shard_runs" for launch in values["launches"])  # no Slurm: detached runs
    last = shard_runs(fake, 3)
    assert sorted(last) == [1, 2]
    for shard, (folder,) in last.items():  # each shard's command got its own index, and its log is its own
        command = (folder / "command.sh").read_text()
        assert command.splitlines()[0].endswith(f"driver.py --shard {shard}") and f"MEDIC_SHARD={shard}" in command
        assert (folder / "exit").read_text() == "0\n" and "driver done" in (folder / "log").read_text()
    assert replay(fake.trace_path).first_divergence is None
    report = postmortem_markdown(read_trace(fake.trace_path))
    assert "## Shards (detached runs)" in report and "| 0 | 2 | yes |" in report and "| 2 | 1 | yes |" in report


def test_only_the_shard_run_that_did_not_finish_runs_again(make_fake: MakeFake) -> None:
    """All shards at once (--no-lead-shard); only shard 1 reaches the drifted call, the others finish: one repair,
    shard 1 alone runs again, and the finished shards are checked, not rerun."""
    fake = make_fake(mode="unattended", shards=ShardSettings(shards=3, lead_shard=False))
    command = ["sh", "-c", f'[ "$MEDIC_SHARD" = 1 ] && exec {fake.python} driver.py; printf 1:a > out.txt']
    config = fake.config.model_copy(update={"target": fake.config.target.model_copy(update={"command": command})})
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    ran = [(launch["outcome"], launch["shards"]) for launch in values["launches"]]
    assert ran == [("crashed", [0, 1, 2]), ("exited", [1])]
    first = values["launches"][0]
    assert first["failed_shard"] == 1 and first["shard_states"] == {"0": "COMPLETED", "1": "FAILED", "2": "COMPLETED"}
    assert len(values["patches"]) == 1 and "legacy" in values["faults"][0]["message"]
    before = [(e["shard"], e["verified"]) for e in fake.events("shard") if e.get("before_launch")]
    assert before == [(0, True), (2, True)]
    assert sorted(shard_runs(fake, 2)) == [1]
    assert replay(fake.trace_path).first_divergence is None


def test_medic_sigkilled_while_shard_runs_run_resumes_onto_the_same_runs(make_fake: MakeFake) -> None:
    """Two shards run (4 s each) when medic is SIGKILLed: they go on without it; `medic resume` follows those same
    runs (no second start), repairs once, runs both again and verifies them."""
    fake = make_fake(mode="unattended", seconds=4.0, shards=ShardSettings(shards=2, lead_shard=False))
    proc = spawn_medic("resume", fake.config.session_id)
    deadline = time.monotonic() + 60
    while len(shard_runs(fake, 1)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    started = shard_runs(fake, 1)
    assert sorted(started) == [0, 1] and not any((f / "exit").exists() for (f,) in started.values())  # still running
    done = medic_cli("resume", fake.config.session_id, timeout=180)
    assert done.returncode == 0, done.stderr
    assert shard_runs(fake, 1) == started  # reattached: no shard of L1 started twice
    first = [e for e in fake.events("launch") if e["n"] == 1]  # a second one only if killed inside launch itself
    assert len(first) == 1 or (len(first) == 2 and first[1]["reattached_shards"] == [0, 1])
    assert sorted(shard_runs(fake, 2)) == [0, 1] and not (fake.host_dir / "runs" / "L3").exists()
    assert fake.events("exit")[-1]["outcome"] == "verified" and len(fake.events("applied")) == 1


@pytest.mark.lab
def test_a_two_shard_lab_extraction_is_repaired_once_and_every_shard_verified(
        private_lab: LabPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded lab (pristine speculators × vLLM 0.16.0) as two detached shard runs at once, each writing its
    own ``hidden_states.<shard>.pt``: the scan's faults are patched before the first launch; the one only a run
    shows (its CacheConfig built through **kwargs the scan cannot read) crashes both shards, is repaired once, and
    both shards' outputs are verified on the next launch."""
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    cache_config_hidden_from_the_scan(private_lab)
    lab = lab_target(private_lab.root)
    out = str(private_lab.output)

    def sharded(words: list[str]) -> list[str]:
        return [word.replace(out, out.removesuffix(".pt") + ".{shard}.pt") for word in words]

    target = lab.model_copy(update={"command": sharded(lab.command),
                                    "validate_command": sharded(lab.validate_command or [])})
    config = SessionConfig(session_id="lab-shards", target=target, mode="unattended",
                           traces_dir=str(tmp_path / "traces"), shards=ShardSettings(shards=2, lead_shard=False))
    outcome, values = run_session(config)
    assert outcome == "verified", values.get("outcome_detail")
    ran = [(launch["outcome"], launch["shards"]) for launch in values["launches"]]
    assert ran == [("crashed", [0, 1]), ("exited", [0, 1])]
    assert values["launches"][0]["shard_states"] == {"0": "FAILED", "1": "FAILED"}  # both hit the same fault
    run_faults = [f for f in values["faults"] if f.get("stage") == "crash"]
    assert len(run_faults) == 1 and run_faults[0]["launch"] == 1  # diagnosed once, not once per shard
    assert values["verified_shards"] == [0, 1]
    for shard in (0, 1):
        assert (private_lab.work / "out" / f"hidden_states.{shard}.pt").stat().st_size > 0
    assert not (private_lab.work / "out" / "hidden_states.pt").exists()


@pytest.mark.ssh
def test_shard_runs_over_ssh(sshd: SSHServer, make_fake: MakeFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same shards on a host reached over real SSH (sshd on 127.0.0.1): started, followed and validated
    through the Host seam; one repair, both shards verified."""
    monkeypatch.setenv("MEDIC_SSH_CONFIG", sshd.config_path)
    fake = make_fake(mode="unattended", host=sshd.alias, args=["--shard", "{shard}"],
                     shards=ShardSettings(shards=2, lead_shard=False))
    outcome, values = run_session(fake.config)
    assert outcome == "verified", values.get("outcome_detail")
    assert [(launch["outcome"], launch["shards"]) for launch in values["launches"]] == [("crashed", [0, 1]),
                                                                                         ("exited", [0, 1])]
    assert len(values["patches"]) == 1 and values["verified_shards"] == [0, 1]
    assert sorted(shard_runs(fake, 2)) == [0, 1]


def test_a_launch_killed_between_two_shard_starts_starts_only_the_missing_one(make_fake: MakeFake) -> None:
    """medic died after the launch's plan and shard 0's start, before shard 1's: the launch again (resume) keeps
    shard 0's run and starts shard 1 alone."""
    fake = make_fake(mode="unattended", shards=ShardSettings(shards=2, lead_shard=False))
    deps = make_deps(fake.config)
    base, ledger = f"{fake.config.host_dir}/runs/L1", f"{fake.config.host_dir}/launches/L1.json"
    try:
        deps.host.run(["mkdir", "-p", f"{fake.config.host_dir}/launches"], timeout=30)
        deps.host.write_bytes_atomic(ledger, json.dumps({"n": 1, "run": base, "shards": [0, 1]}).encode())
        first = runs.launch(deps.host, ["sleep", "30"], run_dir=f"{base}/s0")
        update = launch({"launches": [], "patches": []}, deps)
        folders = update["run"]["shard_runs"]
        assert folders["0"] == first.dir and sorted(shard_runs(fake, 1)) == [0, 1]
        assert [len(found) for found in shard_runs(fake, 1).values()] == [1, 1]  # shard 0 never started twice
        assert fake.events("launch")[-1]["reattached_shards"] == [0]
    finally:
        runs.stop_all(deps.host, [runs.Run.in_dir(folder) for found in shard_runs(fake, 1).values()
                                  for folder in map(str, found)])
        deps.trace.close()
