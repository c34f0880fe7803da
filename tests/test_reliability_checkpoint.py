"""medic SIGKILLed in the one window a trace cannot pin down: a node has finished and its writes are in the
checkpoint db, but the checkpoint of the next step is not. The kill is a SIGKILL the test process sends itself
from a wrapper around SqliteSaver.put_writes (in the test's own subprocess; medic's code is untouched).

Fixed (agent/session.py, run_session, lines ~123-132): after such a kill, ``graph.get_state(...).next`` is
empty (LangGraph leaves tasks whose writes are saved out of ``next``) while ``values`` are not, so
``medic resume`` takes the session for finished: it returns outcome "error", prints nothing and exits 1,
and the session can never be finished. ``graph.stream(None, ...)`` on that state completes it (verified),
so the fix is to resume when ``snapshot.tasks`` still has work or ``values`` has no ``outcome`` yet.
Two or three of the 11 points fail per run (which ones varies: it depends on whether the next checkpoint got
written before the writes' kill landed); they are not marked xfail on purpose.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.fixtures_fake import REPO, MakeFake, medic_cli, record_figure
from tests.test_reliability_kill import good, ledgers_once

KILL_AFTER_WRITES = """
import os, signal, sys
from langgraph.checkpoint.sqlite import SqliteSaver
from agent.session import run_session
from agent.session_files import load_config
target, count = int(sys.argv[2]), [0]
real = SqliteSaver.put_writes
def put_writes(self, config, writes, task_id, task_path=""):
    real(self, config, writes, task_id, task_path)
    channels = sorted({c for c, _ in writes if not c.startswith(("branch:", "__"))})
    if channels:
        count[0] += 1
        if count[0] == target:
            print(",".join(channels), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
SqliteSaver.put_writes = put_writes
run_session(load_config(sys.argv[1]))
"""
STEPS = 11  # nodes with writes in the fake session: preflight ... report


@pytest.mark.parametrize("step", range(1, STEPS + 1))
def test_killed_between_a_nodes_writes_and_the_next_checkpoint(make_fake: MakeFake, step: int) -> None:
    fake = make_fake(mode="unattended", seconds=0.5, session_id=f"w{step}")
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_WRITES, f"w{step}", str(step)], cwd=REPO,
                          capture_output=True, text=True, env=dict(os.environ), timeout=180)
    killed = proc.returncode == -signal.SIGKILL
    node = proc.stdout.strip() or "(none)"
    done = medic_cli("resume", f"w{step}")
    state = ledgers_once(fake)
    ok = killed and done.returncode == 0 and good(state)
    record_figure(f"sigkill after writes #{step} ({node})", survived=int(ok), total=1)
    assert killed, proc.stderr[-2000:]
    # fixed: agent/session.py run_session: a saved-writes state is taken for a finished session (exit 1, no line)
    assert done.returncode == 0, f"after the writes of {node}: exit {done.returncode}, stderr {done.stderr!r}"
    assert good(state), state
