"""Detached runs on both hosts, a run that outlives its SSH connection, and reading phases off vLLM logs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fixtures_ssh import SSHServer
from tests.test_host import process_alive, wait_until
from tools.errors import RunError
from tools.host import Host
from tools.runs import (
    KILLED_EXIT_CODE,
    LoadEta,
    Progress,
    Run,
    RunStatus,
    follow,
    launch,
    phases,
    status,
    stop,
)


def follow_to_end(host: Host, run: Run, offset: int = 0, seconds: float = 15.0, limit: int = 1 << 22,
                  ) -> bytes:
    """Follow until the run has exited and the log is drained, the way the agent does."""
    collected, deadline = bytearray(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        exited = status(host, run).state == "exited"
        while True:
            chunk = follow(host, run, offset, limit)
            collected += chunk.data
            offset = chunk.offset
            if not chunk.data:
                break
        if exited:
            return bytes(collected)
        time.sleep(0.1)
    raise AssertionError(f"run {run.id} still going after {seconds}s")


def test_launch_then_follow_to_the_exit_code(host: Host, tmp_path: Path) -> None:
    run = launch(host, "echo out; echo err >&2; pwd; echo \"$MODE\"; exit 7", run_dir=str(tmp_path / "runs"),
                 cwd=str(tmp_path), env={"MODE": "fast"})
    assert Path(run.dir).parent == tmp_path / "runs" and Path(run.pid).read_text().strip().isdigit()
    log = follow_to_end(host, run)
    # as_shell exports the env, so every command of a compound line sees it
    assert log.decode().splitlines() == ["out", "err", str(tmp_path), "fast"]
    final = status(host, run)
    assert (final.state, final.exit_code) == ("exited", 7)
    assert Path(run.exit).read_text() == "7\n" and not Path(f"{run.dir}/exit.tmp").exists()


def test_follow_reads_a_bounded_chunk_and_resumes_at_its_offset(host: Host, tmp_path: Path) -> None:
    run = launch(host, "seq 1 3000", run_dir=str(tmp_path))
    log = follow_to_end(host, run, limit=1000)
    assert log == "".join(f"{i}\n" for i in range(1, 3001)).encode()
    assert follow(host, run, len(log)).data == b""


def test_stop_terms_the_whole_group_and_keeps_the_exit_code(host: Host, tmp_path: Path) -> None:
    child = tmp_path / "child"
    run = launch(host, f"sleep 30 & echo $! > {child}; wait", run_dir=str(tmp_path))
    assert wait_until(child.exists) and status(host, run).state == "running"
    final = stop(host, run, grace=3.0)
    assert (final.state, final.exit_code) == ("exited", 143)
    assert not process_alive(int(child.read_text()))


def test_stop_kills_what_ignores_term(host: Host, tmp_path: Path) -> None:
    run = launch(host, "trap '' TERM; echo ready; sleep 30", run_dir=str(tmp_path))
    assert wait_until(lambda: Path(run.log).read_text() == "ready\n")
    final = stop(host, run, grace=0.5)
    assert (final.state, final.exit_code) == ("exited", KILLED_EXIT_CODE)


def test_a_run_killed_from_outside_has_vanished(host: Host, tmp_path: Path) -> None:
    run = launch(host, "sleep 30", run_dir=str(tmp_path))
    pid = status(host, run).pid
    assert pid is not None
    host.run(f"kill -KILL -{pid}")  # as the OOM killer would: no exit code gets written
    assert wait_until(lambda: not process_alive(pid))
    assert status(host, run) == RunStatus("vanished", None, pid)


def test_a_run_whose_folder_was_emptied_while_it_ran_is_an_error_not_a_crash(host: Host, tmp_path: Path) -> None:
    """Its folder removed and made again under it (a wrapper's mkdir racing someone's rm -r): no pid, no exit code,
    no log. That is no job's crash to repair (an empty log would read as one): the run is lost, and medic says so."""
    run = launch(host, "sleep 30", run_dir=str(tmp_path))
    pid = status(host, run).pid
    assert pid is not None
    for name in Path(run.dir).iterdir():
        name.unlink()
    host.run(f"kill -KILL -{pid}")
    assert wait_until(lambda: not process_alive(pid))
    with pytest.raises(RunError, match="lost what the run wrote in it"):
        status(host, run)


def test_a_run_without_its_folder_or_log_is_an_error(host: Host, tmp_path: Path) -> None:
    gone = Run.in_dir(str(tmp_path / "never-launched"))
    with pytest.raises(RunError, match="gone"):
        status(host, gone)
    with pytest.raises(RunError, match="run folder"):
        follow(host, gone, 0)


def test_a_run_outlives_the_ssh_connection_that_started_it(sshd: SSHServer, tmp_path: Path) -> None:
    lines = 25
    starter = sshd.connect()
    run = launch(starter, f"for i in $(seq 1 {lines}); do echo $i; sleep 0.1; done", run_dir=str(tmp_path))
    seen, offset = bytearray(), 0
    while seen.count(b"\n") < 3:
        chunk = follow(starter, run, offset)
        seen, offset = seen + chunk.data, chunk.offset
        time.sleep(0.05)
    starter.drop_connection()  # the link dies mid-run, as a flaky network would
    starter.close()

    follower = sshd.connect()
    try:
        seen += follow_to_end(follower, run, offset)
        assert seen.decode().split() == [str(i) for i in range(1, lines + 1)]  # nothing lost, nothing twice
        assert status(follower, run).exit_code == 0
    finally:
        follower.close()


VLLM_LOG = """\
INFO 12-02 10:14:58 [__init__.py:239] Automatically detected platform cuda.
INFO 12-02 10:15:00 [core.py:61] Initializing a V1 LLM engine (v0.9.1) with config: model='tiny'
INFO 12-02 10:15:00 [gpu_model_runner.py:1595] Starting to load model tiny...
Loading safetensors checkpoint shards:   0% Completed | 0/2 [00:00<?, ?it/s]\r\
Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:05<00:05,  5.00s/it]\r\
Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:10<00:00,  5.00s/it]
INFO 12-02 10:15:11 [default_loader.py:291] Loading weights took 10.02 seconds
INFO 12-02 10:15:11 [gpu_model_runner.py:1624] Model loading took 0.0012 GiB memory and 10.35 seconds
INFO 12-02 10:15:12 [kv_cache_utils.py:716] GPU KV cache size: 1,234,560 tokens
INFO 12-02 10:15:12 [kv_cache_utils.py:720] Maximum concurrency for 2,048 tokens per request: 602.81x
INFO 12-02 10:15:13 [core.py:171] init engine (profile, create kv cache, warmup model) took 1.2 seconds
some line from the extraction script itself
Adding requests: 100%|██████████| 4/4 [00:00<00:00, 1201.14it/s]
Processed prompts:  50%|█████     | 2/4 [00:01<00:01,  1.50it/s, est. speed input: 10.00 toks/s]\r\
Processed prompts: 100%|██████████| 4/4 [00:02<00:00,  1.50it/s, est. speed input: 10.00 toks/s]
"""


def test_phases_follow_a_vllm_log_in_order() -> None:
    events = phases(VLLM_LOG)
    order = [e.phase for i, e in enumerate(events) if i == 0 or events[i - 1].phase != e.phase]
    assert order == ["importing", "loading", "kv_cache", "warmup", "extracting", "done"]
    shards = [e.progress for e in events if e.phase == "loading" and e.progress]
    assert shards == [Progress(0, 0, 2, 0, None), Progress(50, 1, 2, 5, 5), Progress(100, 2, 2, 10, 0)]
    assert [e.took for e in events if e.took is not None] == [10.02, 10.35, 1.2]
    assert events[-1].progress == Progress(100, 4, 4, 2, 0)
    assert phases("Traceback (most recent call last):\nValueError: nope\n") == []


def test_load_eta_uses_the_bar_rate_then_earlier_loads() -> None:
    eta = LoadEta(earlier_loads=[30.0, 40.0, 100.0])
    assert eta.remaining(12.0, Progress(25, 1, 4, 5.0, 15.0)) == 15.0  # 5 s a shard, 3 shards to go
    assert eta.remaining(10.0, Progress(0, 0, 4, 0.0, None)) == 30.0  # the bar has not moved: median 40 - 10
    assert eta.remaining(55.0) == 0.0
    assert eta.remaining(99.0, Progress(100, 4, 4, 20.0, 0.0)) == 0.0
    assert LoadEta().remaining(10.0) is None
