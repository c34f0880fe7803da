"""The lab's cascade as a session must meet it (pristine speculators 0.3.0 on vLLM 0.16.0): which faults, in which
order, found how, fixed with what — asserted on a session's trace and report by every test that runs the lab from
pristine (test_agent_lab.py without the scan, test_panel_terminal.py with it, as `medic run --lab` does)."""

from __future__ import annotations

from typing import Any

# with the scan: eight faults the static scan finds before any launch (the last a playbook predicts: caching left on
# by the installed CacheConfig's default), none left for a run
SCANNED = [
    ("TypeError", "unexpected keyword argument 'kv_cache_specs'"),
    ("TypeError", "required positional argument: 'block_size'"),
    ("TypeError", "SchedulerConfig() missing 1 required positional argument: 'is_encoder_decoder'"),
    ("RuntimeError", "sample_tokens() must be called"),
    ("ReturnShapeDrift", "collective_rpc(unique_reply_rank=...)"),
    ("RuntimeError", "NVIDIA driver"),
    ("AttributeError", "get_input_embeddings"),
    ("PredictedFault", "leaves enable_prefix_caching to the installed default True"),
]
CRASHED: list[tuple[str, str]] = []
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
# (found by the scan, found by runs, root causes only a worker process printed)
MODES = {"scan": (SCANNED, CRASHED, 0), "no-scan": ([], AT_RUN_TIME, 2)}


def assert_the_cascade(trace: list[dict[str, Any]], report: str, mode: str) -> None:
    """One fault per step of the cascade, in order, each repaired where its cause is; verified at the end."""
    scanned, crashed, from_workers = MODES[mode]
    cascade = scanned + crashed
    faults = [e["data"] for e in trace if e["kind"] == "fault"]
    assert len(faults) == len(cascade), [f["summary"] for f in faults]
    for fault, (exc_type, piece) in zip(faults, cascade, strict=True):
        assert exc_type in fault["summary"] and piece in fault["summary"], fault["summary"]
    assert [f["stage"] for f in faults] == ["scan"] * len(scanned) + ["crash"] * len(crashed)
    launches = [e["data"] for e in trace if e["kind"] == "launch"]
    assert len(launches) == len(crashed) + 1  # one launch per fault only a run can show, then the good one
    worker_faults = [f for f in faults if (f.get("proc") or "").startswith("Worker")]
    assert len(worker_faults) == from_workers
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
    exit_event = [e for e in trace if e["kind"] == "exit"][-1]  # a --notify of the end may follow it
    assert exit_event["data"]["outcome"] == "verified"
    assert "Outcome: verified" in report
    assert report.count("### ") == len(cascade)  # one section per patch, each with its diff
