"""The panel's content from trace events alone (what `medic run` and `medic watch` both show): which launch of
how many, the load's ETA from the log, from earlier launches of the same kind, or from earlier sessions of the
same command; what is kept; the wait's checks. And the plain view: a load is one line, not "0%" and "100%"."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from agent.record.panel import PanelState, earlier_loads
from agent.record.view import View

CONFIG = {"session_id": "p", "mode": "approve", "budgets": {"max_launches": 4, "max_wall": 3600.0},
          "target": {"host": "gpu-box", "workdir": "/data/job", "python": "/env/bin/python",
                     "command": ["python", "extract.py"]}}


def state(history: list[float] | None = None) -> PanelState:
    return PanelState.for_config(CONFIG, started=1000.0, history=history)


def test_launch_count_phase_and_eta_from_the_log_then_from_the_same_kind_of_launch() -> None:
    s = state()
    s.apply("launch", {"n": 1, "kind": "canary"}, 1010.0)
    assert s.lines(1011.0)[1].startswith("canary run (launch L1; 0 of 4 target launches used)")
    s.apply("run_end", {"outcome": "exited", "phases": {"loading": 2.0, "warmup": 3.0}}, 1015.0)
    s.apply("launch", {"n": 2, "kind": "target"}, 1020.0)
    # a canary's 3 s load says nothing about the target's: no ETA yet
    assert s.lines(1030.0)[1] == "launch 1 of 4 (target) · phase starting for 10.0s, load ETA unknown (first load)"
    s.apply("phase", {"phase": "loading", "percent": 25.0, "eta": 90.0}, 1040.0)  # the shard bar says 90 s
    assert s.lines(1050.0)[1] == "launch 1 of 4 (target) · phase loading for 30.0s, load ETA 1m 20s"
    assert s.progress(1050.0) is not None and 0.2 < s.progress(1050.0) < 0.3  # type: ignore[operator]
    s.apply("run_end", {"outcome": "crashed", "phases": {"loading": 20.0, "kv_cache": 130.0}}, 1160.0)
    s.apply("launch", {"n": 3, "kind": "target"}, 1200.0)
    assert s.lines(1230.0)[1] == "launch 2 of 4 (target) · phase starting for 30.0s, load ETA 1m 40s"
    assert s.lines(1230.0)[2] == "elapsed 3m 50s · budget left 2 launches, 56m 10s"
    s.apply("phase", {"phase": "warmup"}, 1340.0)
    assert "ETA" not in s.lines(1341.0)[1] and s.progress(1341.0) is None  # loaded: no ETA any more


def test_the_first_launch_learns_from_earlier_sessions_of_the_same_command(tmp_path: Path) -> None:
    def write(name: str, command: list[str], load: float) -> None:
        config = {**CONFIG, "target": {**CONFIG["target"], "command": command}}  # type: ignore[dict-item]
        lines = [{"format": "medic-trace", "version": 1, "ts": 1.0, "config": config},
                 {"ts": 2.0, "kind": "run_end", "node": "watch", "data": {"phases": {"loading": 1.0,
                                                                                      "warmup": load}}}]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    write("yesterday", ["python", "extract.py"], 600.0)
    write("other-model", ["python", "other.py"], 5.0)
    write("p", ["python", "extract.py"], 1.0)  # this session's own trace is not history
    history = earlier_loads(tmp_path, CONFIG, skip="p")
    assert history == [600.0]
    s = state(history)
    s.apply("launch", {"n": 1, "kind": "target"}, 1000.0)
    assert s.lines(1100.0)[1].endswith("load ETA 8m 20s")


def test_kept_changes_faults_checks_and_waiting() -> None:
    s = state()
    s.apply("fault", {"stage": "scan"}, 1001.0)
    assert "phase scan" in s.lines(1002.0)[1]
    s.apply("applied", {"patch_id": "a", "files": ["/x.py"]}, 1003.0)
    s.apply("applied", {"patch_id": "b", "env": ["prepend LD_PRELOAD"]}, 1004.0)
    s.apply("applied", {"patch_id": "c", "files": ["/y.py"]}, 1005.0)
    s.apply("reverted", {"patch_id": "c"}, 1006.0)
    assert s.lines(1007.0)[3] == "faults 1 · kept 1 patch(es), 1 env change(s)"
    s.apply("launch", {"n": 1, "kind": "target"}, 1010.0)
    s.apply("checks_queued", {"checks": ["import speculators.x", "disk_free /data/job/out 1024", "stale_runs s"]},
            1011.0)
    s.apply("check", {"check": "import speculators.x", "ok": True, "when": "during_load"}, 1012.0)
    assert s.lines(1013.0)[4] == "checks this wait: 1 of 3 ok · now disk_free <workdir>/out, 1 more"
    s.apply("approval", {"patch_id": "d"}, 1020.0)
    assert s.lines(1021.0)[-1] == "waiting for approval"
    s.apply("stopped", {"signal": "SIGTERM"}, 1030.0)
    assert s.lines(2000.0)[2].startswith("elapsed 30.0s") and s.lines(2000.0)[-1] == "session stopped"
    s.apply("resume", {"pid": 1}, 2000.0)
    assert s.lines(2001.0)[-1].startswith("checks this wait")  # going again: neither waiting nor stopped


def test_a_one_shard_load_is_one_plain_line() -> None:
    out = io.StringIO()
    view = View(Console(file=out, width=10_000, soft_wrap=True, color_system=None))
    for pct, eta in ((None, 8.0), (0.0, 8.0), (100.0, 0.0)):
        view.event("phase", "watch", {"phase": "loading", "percent": pct, "eta": eta})
    view.event("phase", "watch", {"phase": "warmup"})
    assert out.getvalue().splitlines() == ["  phase loading, ETA 8.0s", "  phase warmup"]
