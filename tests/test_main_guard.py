"""A driver with no ``__main__`` guard under the 'spawn' start method (which CUDA forces): Python's own check
raises "An attempt has been made to start a new process before the current process has finished its
bootstrapping phase"; medic reads that raise in the target env's interpreter, and moves the driver's top-level
work under the idiom the message names (agent/repair/derived_driver.py, agent/repair/main_guard.py).

Real processes throughout: a small spawn script run by the lab's python (seconds), and one whole session on a
private lab copy whose driver has no guard, under VLLM_WORKER_MULTIPROC_METHOD=spawn, to verified output.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from agent.cli.run import lab_target
from agent.config import SessionConfig
from agent.faults import fault_from_log
from agent.repair.derived_driver import main_guard
from agent.repair.engine import RepairEngine
from agent.repair.main_guard import guard_module
from agent.repair.types import RepairContext
from agent.session import run_session
from lab.build import LabBuilder, LabPaths
from tools.host import LocalHost
from tools.patches import apply_patch

LAB_SCRIPTS = Path(__file__).parent / "lab_scripts"
IDIOM = "if __name__ == '__main__':"

SPAWN_SCRIPT = '''\
"""Squares in a spawned child (no guard)."""
import multiprocessing as mp

CTX = mp.get_context("spawn")


def square(q, n):
    q.put(n * n)


queue = CTX.Queue()
child = CTX.Process(target=square, args=(queue, 7))
child.start()
child.join()
if child.exitcode:
    raise SystemExit(f"the child failed (exit {child.exitcode})")
print("got", queue.get(timeout=60))
'''


def run(python: Path, script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), str(script)], cwd=script.parent, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def context(lab: LabPaths, workdir: Path) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site, str(workdir)),
                         site_packages=(site,), workdir=str(workdir))


def test_the_guard_comes_from_the_interpreters_own_raise_and_the_relaunch_runs(lab: LabPaths, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = work / "squares.py"
    script.write_text(SPAWN_SCRIPT)
    failed = run(lab.python, script)
    assert failed.returncode != 0 and "bootstrapping phase" in failed.stderr
    fault = fault_from_log((failed.stdout + failed.stderr).encode())
    found = RepairEngine().candidates(context(lab, work), fault)
    assert [c.origin for c in found] == ["derived:main_guard"]
    patch = found[0].patch
    assert [f.path for f in patch.files] == [str(script)]
    assert any("multiprocessing/spawn.py" in e for e in patch.evidence)  # read from the installed interpreter
    apply_patch(LocalHost(), patch, roots=(str(work),), ledger_dir=str(tmp_path / "ledger"))
    tree = ast.parse(script.read_text())
    assert [type(s).__name__ for s in tree.body] == ["Expr", "Import", "FunctionDef", "If"]
    fixed = run(lab.python, script)
    assert fixed.returncode == 0 and fixed.stdout.strip() == "got 49", fixed.stderr[-2000:]


def test_another_fault_in_a_workdir_module_is_not_taken_for_it(lab: LabPaths, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = work / "boom.py"
    script.write_text("import os\nvalue = int(os.environ.get('NOPE', 'x'))\n")
    failed = run(lab.python, script)
    fault = fault_from_log(failed.stderr.encode())
    assert fault.exc_type == "ValueError" and main_guard(context(lab, work), fault) == []


def test_work_moves_under_the_guard_definitions_stay_and_strings_keep_their_lines() -> None:
    text = textwrap.dedent('''\
        """Doc."""
        import sys

        LIMIT = 3
        args = sys.argv[1:]
        # said twice
        BANNER = """first
        second"""


        def show(x):
            return x * LIMIT


        print(BANNER, show(len(args)))
        ''')
    out = guard_module(text, IDIOM)
    assert out is not None
    tree = ast.parse(out.text)
    assert [type(s).__name__ for s in tree.body] == ["Expr", "Import", "Assign", "Assign", "FunctionDef", "If"]
    guard = tree.body[-1]
    assert isinstance(guard, ast.If) and [ast.unparse(s) for s in guard.body] == [
        "args = sys.argv[1:]", "print(BANNER, show(len(args)))"]
    assert 'BANNER = """first\nsecond"""' in out.text  # the string's own lines are not indented
    assert out.hoisted == (7, 11)


def test_no_rewrite_when_moving_a_definition_above_the_work_would_change_it() -> None:
    reads_work = "import sys\nargs = sys.argv\n\ndef f(n=len(args)):\n    return n\n\nprint(f())\n"
    assert guard_module(reads_work, IDIOM) is None  # f's default is evaluated when f is defined
    rebinds = "import sys\nf = sys.exit\ndef f():\n    return 1\nprint(f())\n"
    assert guard_module(rebinds, IDIOM) is None
    one_line = "import sys; print(sys.argv)\n"
    assert guard_module(one_line, IDIOM) is None
    nothing_to_move = "import sys\n\ndef f():\n    return sys.argv\n"
    assert guard_module(nothing_to_move, IDIOM) is None


@pytest.fixture(scope="module")
def unguarded_session(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, Path]:
    """One session on a private lab whose driver has no guard, its workers started with 'spawn'."""
    base = tmp_path_factory.mktemp("unguarded")
    root = base / "lab"
    subprocess.run(["cp", "-al", str(lab.root), str(root)], check=True, timeout=300)
    paths = LabPaths(root)
    LabBuilder(paths).reset()
    paths.driver.unlink()  # a new file, not a write through the hard link into the shared lab
    shutil.copy(LAB_SCRIPTS / "extract_unguarded.py", paths.driver)
    target = lab_target(root)
    target.env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    config = SessionConfig(session_id="unguarded", target=target, traces_dir=str(base / "traces"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEDIC_HOME", str(base / "home"))
        outcome, values = run_session(config)
    return outcome, values, base / "traces" / "unguarded.jsonl"


def test_a_session_under_spawn_guards_the_driver_and_reaches_verified_output(
        unguarded_session: tuple[str, dict, Path]) -> None:
    outcome, values, trace = unguarded_session
    events = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    faults = [e["data"]["summary"] for e in events if e["kind"] == "fault" and e["node"] == "diagnose"]
    assert any("bootstrapping phase" in f for f in faults)
    guard = [p for p in values["patches"] if p["origin"] == "derived:main_guard"]
    assert len(guard) == 1 and guard[0]["patch"]["files"][0]["path"].endswith("/work/extract.py")
    after = faults[faults.index(next(f for f in faults if "bootstrapping phase" in f)) + 1:]
    assert not any("bootstrapping phase" in f for f in after)  # the relaunch got past it
    assert outcome == "verified", values.get("outcome_detail")
    assert events[-1]["kind"] == "exit"
