"""The postmortem and the report say honestly what each load cost, give every patch its reason, and round
numbers for people (issue 14, item 10).

tests/data/traces/crafted_canary_session.jsonl is crafted from the real lab session try3 (lab_session.jsonl):
the same eight faults, runs, candidates, patches and checks, found by canary runs of a ``--lab-size large
--no-scan`` session (launch kinds and commands, fault stages and the preflight's canary changed to match),
then the canary's validation and one target run on the large model. Today's replay re-decides it without a
divergence, so it is a session today's medic would run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import SessionConfig, Target
from agent.readers.postmortem import postmortem_markdown
from agent.readers.postmortem_html import postmortem_html
from agent.readers.postmortem_summary import summarize
from agent.readers.replay import replay
from agent.readers.tracefile import read_trace
from agent.record.report import human_numbers, human_seconds, render_report
from agent.repair.context import candidate
from agent.repair.types import RepairContext
from tests.fixtures_replay import replay_exempt
from tools.host import LocalHost

TRACES = Path(__file__).parent / "data" / "traces"
CANARY = TRACES / "crafted_canary_session.jsonl"
SCAN = TRACES / "legacy_scan_loop_session.jsonl"  # recorded before the scan went through the one repair path
# what the scan node recorded on its 'applied' events (with the rationale the same repairs gave in try3)
SCAN_RATIONALES = {
    "96d7a41051ca05cc": "get_kv_cache_config_from_groups() no longer takes kv_cache_specs= (installed signature: "
                        "vllm_config, kv_cache_groups, available_memory)",
    "8997e8b1857debdc": "Scheduler() now requires block_size; passing what vLLM's own code passes",
    "10a04880bdc3b2b5": "SchedulerConfig() now requires is_encoder_decoder; passing what vLLM's own code passes",
}


def test_canary_runs_are_counted_apart_from_target_loads() -> None:
    assert replay(CANARY).first_divergence is None
    trace = read_trace(CANARY)
    s = summarize(trace)
    assert [launch.kind for launch in s.launches] == ["canary"] * 9 + ["target"]
    assert s.load_wasted == 0 and s.load_spent == pytest.approx(171.301)
    assert s.canary_seconds == pytest.approx(169.5)
    md = postmortem_markdown(trace)
    assert "- target loads: 1 (2m 51s), wasted: 0 (0.0s: loads of target launches that then failed)" in md
    assert "- canary runs: 9 (2m 49s in all, on a tiny model); each of the 8 fault(s) found there saved a " \
           "target load" in md
    assert "8 fault(s): 8 by canary runs (no target load spent)." in md
    assert md.count("caught by a canary run on a tiny model: a target load saved") == 8
    assert "of target load wasted" not in md
    page = postmortem_html(trace)
    assert "target loads: 1 (2m 51s), wasted: 0 (0.0s" in page and "canary runs: 9 (2m 49s in all" in page


def test_a_target_session_still_counts_its_wasted_loads() -> None:
    md = postmortem_markdown(read_trace(TRACES / "lab_session.jsonl"))
    assert "- target loads: 8 (2m 19s), wasted: 7 (1m 58s: loads of target launches that then failed)" in md
    assert "canary runs" not in md
    assert "8 fault(s): 1 by a target run before its load, 7 by a crash after a target load." in md
    assert "caught by a crash after the load (20.1s of target load wasted)" in md


def test_every_patch_shows_its_rationale_from_the_candidate_or_the_applied_event(tmp_path: Path) -> None:
    rows = [json.loads(row) for row in SCAN.read_text().splitlines()]
    for row in rows[1:]:
        if row["kind"] == "applied" and row["node"] == "scan":
            row["data"]["rationale"] = SCAN_RATIONALES[row["data"]["patch_id"]]
        elif row["kind"] == "candidate" and row["data"]["patch_id"] == "5cb00ff4eb9dfbd2":
            moved = row["data"].pop("rationale")  # a candidate without it: the applied event has it
            next(r for r in rows[1:] if r["kind"] == "applied" and r["data"]["patch_id"] == "5cb00ff4eb9dfbd2")[
                "data"]["rationale"] = moved
    path = tmp_path / "scan.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    replay_exempt(path, "the legacy scan trace, recorded before the scan went through the one repair path")
    trace = read_trace(path)
    md, page = postmortem_markdown(trace), postmortem_html(trace)
    assert "no rationale" not in md + page
    for why in SCAN_RATIONALES.values():
        assert f"\n{why}\n" in md and why.replace("'", "&#x27;") in page
    assert "torch.cuda.mem_get_info() needs an NVIDIA driver." in md


def test_a_trace_without_a_scan_rationale_names_the_fault_the_patch_fixes() -> None:
    md = postmortem_markdown(read_trace(SCAN))
    assert "### 96d7a41051ca05cc — derived:unexpected_kwarg:drop for fault 1: applied" in md
    assert "(no rationale recorded; the fault it fixes: `TypeError: get_kv_cache_config_from_groups() got an " \
           "unexpected keyword argument 'kv_cache_specs'`)" in md


@pytest.mark.parametrize("given", ["", "   \n"])
def test_a_derived_candidate_always_carries_a_rationale(tmp_path: Path, given: str) -> None:
    path = tmp_path / "site-packages" / "speculators" / "gen.py"
    path.parent.mkdir(parents=True)
    path.write_text("x = f(a=1, b=2)\n")
    ctx = RepairContext(host=LocalHost(), python="python3", roots=(str(tmp_path / "site-packages"),))
    found = candidate(ctx, {str(path): "x = f(a=1)\n"}, origin="derived:unexpected_kwarg:drop", rationale=given,
                      evidence=[f"{path}:1: x = f(a=1, b=2)"])
    assert found.rationale == found.patch.rationale
    assert found.rationale == f"derived:unexpected_kwarg:drop: {path}:1: x = f(a=1, b=2) (edits gen.py)"


def test_numbers_are_rounded_where_people_read_them_and_whole_in_the_trace() -> None:
    assert [human_seconds(x) for x in (0.04, 16.068, 59.96, 83.4, 236.42, 3725.0)] == [
        "0.0s", "16.1s", "1m 00s", "1m 23s", "3m 56s", "1h 02m"]
    kept = "vllm 0.16.0+cpu, key 8104561c7b74bbbe, eta 1.5, /tmp/run.1234567/x, v1.2.345678, 1.2345678.9"
    assert human_numbers(kept) == kept
    assert human_numbers("error 0.0020738840103149414, then 6.298347e-05 and 1.5900912361145014.") == \
        "error 0.0021, then 0.000063 and 1.6."
    trace = read_trace(CANARY)
    md, page = postmortem_markdown(trace), postmortem_html(trace)
    assert "per-layer max abs error {'2': 0.0031, '4': 0.0047, '6': 0.0069}" in md
    assert "| 10 (L10) | +3m 07s | 3m 56s | loading @19.8s, warmup @2m 51s | exited |" in md
    assert "0.003117084503173828" not in md + page and "0.0031" in page and "3m 56s" in page
    assert "0.003117084503173828" in CANARY.read_text()  # the trace keeps the full values
    state = {"outcome": "unverified", "launches": [
        {"n": 1, "kind": "target", "started": 100.0, "ended": 183.4, "outcome": "exited", "exit_code": 0,
         "phases": {"loading": 19.842, "warmup": 71.30123}, "load_seconds": 71.30123}],
        "outcome_detail": "NOT verified: layer 2 max abs error 0.0307349562644958 > 0.02",
        "faults": [{"stage": "validate", "exc_type": "OutputMismatch", "launch": 1, "frames": [],
                    "message": "layer 2 max abs error 0.0307349562644958 > 0.02"}], "patches": [],
        "verifications": [{"ok": True, "when": "before", "check": "grep", "detail": "took 12.3456789s"}]}
    config = SessionConfig(session_id="s", target=Target(python="/usr/bin/python3", workdir="/tmp",
                                                         command=["python", "extract.py"]))
    report = render_report(state, config)  # type: ignore[arg-type]
    assert "0.0307349562644958" not in report and report.count("0.031") == 3
    assert "| 1 | target | exited | 0 | 1m 23s | 1m 11s | loading @19.8s, warmup @1m 11s |" in report
    assert "took 12.3s" in report
