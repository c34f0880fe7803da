"""One pair of the space bench: build its lab, copy it pristine, run medic on the copy, judge what it said.

medic runs in a child process (``python -m bench.space_run SPEC`` — a crash or a leak of one pair never reaches the
next): unattended, no --validate, no LLM. When it stops for a host step, the child carries the step out (it plays
the person) and resumes, at most three times. The lab's own checker then judges what medic called verified.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.space_disk import NO_SPACE, OWNER, mark, one_bench_on, unmark  # noqa: E402
from bench.space_judge import judge, lab_checker  # noqa: E402
from bench.space_pair import Pair  # noqa: E402
from lab.build import DEFAULT_ROOT, LabBuilder, LabPaths, Variant, clone_venv  # noqa: E402
from lab.lab_requirements import pip_refusal  # noqa: E402
from lab.server_lab import ServerLabPaths  # noqa: E402
from lab.server_pair_lab import server_lab_builder  # noqa: E402
from lab.server_pairs import ServerPair, left_out  # noqa: E402
from tools import runs  # noqa: E402
from tools.errors import LabError, MedicError, PinsConflict  # noqa: E402
from tools.host import LocalHost  # noqa: E402

# the labs `make test` builds and the tests copy: a run never removes these
KEPT_LABS = (DEFAULT_ROOT, Variant("0.18.1", "0.3.0").default_root(), ServerPair().default_root())
MAX_HOST_STEPS = 3


def lab_root(pair: Pair) -> Path:
    if pair.flavour == "server":
        return ServerPair(pair.spec, pair.vllm, pair.no_deps).default_root()
    return Variant(pair.vllm, pair.spec).default_root()


def builder(pair: Pair, root: Path) -> LabBuilder:
    if pair.flavour == "server":
        return server_lab_builder(LabPaths(root), pair=ServerPair(pair.spec, pair.vllm, pair.no_deps))
    return LabBuilder(LabPaths(root), variant=Variant(pair.vllm, pair.spec))


def pip_log(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


def build(pair: Pair, *, fresh: bool) -> tuple[Path | None, dict[str, Any]]:
    root = lab_root(pair)
    if fresh:
        mark(root)  # a bench killed mid-pair leaves this lab; the next bench's sweep removes it
    try:
        builder(pair, root).build(("tiny",))
    except PinsConflict as err:
        return None, {"outcome": "not installable", "stage": "build", "detail": str(err)}
    except (LabError, MedicError) as err:
        if NO_SPACE in str(err) or NO_SPACE in pip_log(root / "build.log"):
            # the machine's disk, not the pair: no verdict, and the bench stops (bench/space.py)
            return None, {"outcome": "bench error", "stage": "build", "detail": f"{NO_SPACE}: {err}"}
        words = pip_refusal(pip_log(root / "build.log"))
        if words:
            return None, {"outcome": "not installable", "stage": "build", "detail": f"pip: {words}"}
        # no reason of pip's for the pair itself (a network error, a timeout): no verdict, the next bench retries it
        return None, {"outcome": "bench error", "stage": "build", "detail": str(err)}
    return root, {}


def private_copy(pair: Pair, root: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for part in root.iterdir():
        if part.name == "venv":
            clone_venv(part, dest / "venv")
        elif part.name not in ("build.log", OWNER):
            subprocess.run(["cp", "-al", str(part), str(dest / part.name)], check=True, stdin=subprocess.DEVNULL)
    builder(pair, dest).reset()
    return dest


def run_pair(pair: Pair, work: Path, max_launches: int, *, keep: bool, necessity: bool = True) -> dict[str, Any]:
    with one_bench_on(lab_root(pair)):
        return run_pair_alone(pair, work, max_launches, keep=keep, necessity=necessity)


def run_pair_alone(pair: Pair, work: Path, max_launches: int, *, keep: bool, necessity: bool) -> dict[str, Any]:
    root = lab_root(pair)
    # a lab this bench makes is removed after its pair; so is one a stopped bench left half-made (no probe stamp)
    fresh = not LabPaths(root).built
    built, failed = build(pair, fresh=fresh)
    if built is None:
        if fresh and not keep:
            shutil.rmtree(root, ignore_errors=True)
        return failed
    copy = work / pair.key.replace(":", "_").replace("+", "_")
    try:
        private_copy(pair, built, copy)
        row = medic_on_copy(pair, copy, work, max_launches, necessity=necessity)
        if pair.no_deps:  # what the forced install left out, as pip said it (else the declared ranges' refusal)
            row["forced"] = left_out(built) or [str(pair.verdict)]
        return row
    finally:
        if keep:
            unmark(root)
        else:
            shutil.rmtree(copy, ignore_errors=True)
            if fresh and built not in KEPT_LABS:
                shutil.rmtree(root, ignore_errors=True)


def medic_on_copy(pair: Pair, copy: Path, work: Path, max_launches: int, *, necessity: bool = False
                  ) -> dict[str, Any]:
    """medic in a child process on a private pristine copy, then the oracles on what it said."""
    session = f"space-{copy.name}"
    env = {**os.environ, "MEDIC_HOME": str(work / "home")}
    try:
        child = subprocess.run(
            [sys.executable, "-m", "bench.space_run", json.dumps({"flavour": pair.flavour, "lab": str(copy),
                                                                  "session": session, "max_launches": max_launches,
                                                                  "necessity": necessity})],
            cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except BaseException:  # the bench stopped (Ctrl-C, SIGTERM): a stopped medic leaves its runs up by design
        said = subprocess.run([sys.executable, "-c", "from agent.cli.main import main; main()", "stop", session],
                              cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        print(f"medic stop {session} (exit {said.returncode}): {(said.stdout + said.stderr).strip()[-600:]}",
              file=sys.stderr, flush=True)
        end_what_is_left(copy)
        raise
    (work / f"{copy.name}.log").write_text(child.stdout + child.stderr)
    try:
        row: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {"outcome": "bench error", "detail": f"the child exited {child.returncode}: {tail}"}
    row.update(judge(pair, copy, Path(row.pop("trace")), row))
    return row


def end_what_is_left(copy: Path) -> None:
    """Every run medic launched in the pair's copy, ended (its process group: a server and its workers), whatever
    ``medic stop`` ended first: the copy is removed next, and no process may outlive the bench. What ``medic stop``
    missed is said, for it is medic's to end."""
    def running(run: runs.Run) -> bool:
        try:
            return runs.status(LocalHost(), run).state == "running"
        except MedicError:  # its folder is gone or unreadable: nothing of it to end from here
            return False

    alive = [run for pid in copy.rglob("runs/*/*/pid") if running(run := runs.Run.in_dir(str(pid.parent)))]
    if alive:
        print(f"medic stop left {len(alive)} run(s) up; the bench ends them: "
              f"{', '.join(run.dir for run in alive)}", file=sys.stderr, flush=True)
        runs.stop_all(LocalHost(), alive)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: one medic session on the copy, host steps carried out, and what happened."""
    from agent.cli.run import lab_target
    from agent.config import Budgets, SessionConfig
    from agent.session import pending_interrupt, run_session
    from agent.session_files import save_config

    lab, session = Path(spec["lab"]), str(spec["session"])
    traces = lab.parent / "traces"
    target = lab_target(lab).model_copy(update={"validate_command": None})  # medic's own check
    config = SessionConfig(session_id=session, target=target, traces_dir=str(traces),
                           budgets=Budgets(max_launches=int(spec["max_launches"]), max_wall=3600.0))
    save_config(config)  # as `medic run` does: `medic stop` (the bench stopped) and `medic resume` find the session
    started = time.monotonic()
    outcome, _ = run_session(config)
    steps: list[dict[str, Any]] = []
    while outcome == "host_change" and len(steps) < MAX_HOST_STEPS:
        asked = list((pending_interrupt(session) or {}).get("host_steps") or [])
        for step in asked:
            done = subprocess.run(["bash", "-c", step], capture_output=True, text=True, stdin=subprocess.DEVNULL)
            steps.append({"step": step, "exit": done.returncode})
        answer = {"action": "approve", "by": "space bench (plays the person)", "reason": "host changed: "
                  + "; ".join(asked)}
        outcome, _ = run_session(config, resume=answer)
    seconds = round(time.monotonic() - started, 1)
    necessity = None
    if outcome == "verified" and spec.get("necessity"):
        from agent.session import read_checkpoint
        from bench.space_necessity import leave_each_out

        kept = list(read_checkpoint(session)[0].get("patches") or [])
        try:
            output = ServerLabPaths(lab).output if spec["flavour"] == "server" else LabPaths(lab).output
            necessity = leave_each_out(config, kept, lambda: lab_checker(str(spec["flavour"]), lab).returncode == 0,
                                       output)
        except Exception as err:  # the oracle's own failure never loses the session's verdict
            necessity = {"error": f"{type(err).__name__}: {err}"}
    return {"medic_outcome": outcome, "host_steps": steps, "seconds": seconds, "necessity": necessity,
            "trace": str(traces / f"{session}.jsonl")}


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]))))
