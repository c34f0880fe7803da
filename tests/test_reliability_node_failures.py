"""A failure injected into each node of the graph (an exception where its code would run) never crashes medic.

For every node a fake session reaches (and approve, in approve mode): the real ``medic`` CLI (its main(), in this
process, so the failure can be injected) exits with internal_error's code — never 1 — and one line naming the
node, no traceback; the trace ends with an ``exit`` event; ``medic status`` says failed, not stopped; a second
``medic resume`` says exactly the same; once the failure is gone, ``medic resume`` goes on to the end.

Before: the exception left main() as a traceback (exit 1), the trace ended without an exit event, and status
said "stopped, exit 9".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pytest

import agent.graph
from agent.cli.main import main
from agent.outcomes import exit_code
from agent.readers.replay import replay
from tests.fixtures_fake import Fake, MakeFake, record_figure

INTERNAL = exit_code("internal_error")
# every node a fake session reaches: a crash, a derived repair, a relaunch, a verified output (tests below prove
# each was reached: the failure names it)
REACHED = ["preflight", "scan", "launch", "watch", "diagnose", "repair", "apply", "verify", "validate", "report"]


def medic(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``medic ARGS`` through the CLI's own entry point: (exit code, stdout, stderr)."""
    argv, sys.argv = sys.argv, ["medic", *args]
    try:
        main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else -1)
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return code, out.out, out.err


def failing(real: Callable[..., Any], what: str, armed: list[bool]) -> Callable[..., Any]:
    def node(*args: Any, **kwargs: Any) -> Any:
        if armed[0]:
            raise RuntimeError(f"injected failure in {what}")
        return real(*args, **kwargs)

    return node


def last_event(fake: Fake) -> dict[str, Any]:
    return fake.trace[-1]


def status(capsys: pytest.CaptureFixture[str], session: str) -> dict[str, Any]:
    code, out, err = medic(capsys, "status", session, "--json")
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


@pytest.mark.parametrize("node", [*REACHED, "approve"])
def test_a_failure_in_a_node_is_an_outcome_and_resume_goes_on(make_fake: MakeFake, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch, node: str) -> None:
    fake = make_fake(mode="approve" if node == "approve" else "unattended", session_id=f"n-{node}")
    armed = [True]
    monkeypatch.setattr(agent.graph, node, failing(getattr(agent.graph, node), node, armed))
    first = medic(capsys, "resume", fake.config.session_id)  # a saved, never-run session: resume starts it
    again = medic(capsys, "resume", fake.config.session_id)  # the step fails again: the same line
    found = status(capsys, fake.config.session_id)
    listed = medic(capsys, "sessions")[1]
    end = last_event(fake)
    armed[0] = False
    done = medic(capsys, "resume", fake.config.session_id)
    want = 5 if node == "approve" else 0  # approve mode then waits for a person, as it should
    record_figure(f"failure injected in node {node}", survived=int(first[0] == INTERNAL and done[0] == want),
                  total=1, exit_code=first[0], resumed_exit=done[0])
    for code, _out, err in (first, again):
        assert code == INTERNAL, (code, err)
        lines = [line for line in err.splitlines() if "failed in" in line]
        assert len(lines) == 1 and lines[0].startswith(f"medic: failed in {node}: RuntimeError: injected failure "
                                                       f"in {node}") and lines == err.strip().splitlines()[-1:], err
        assert "Traceback" not in err
    assert end["kind"] == "exit" and end["data"]["outcome"] == "internal_error" and end["data"]["node"] == node, end
    assert (found["state"], found["exit_code"]) == ("failed", INTERNAL), found
    assert f"injected failure in {node}" in found["detail"] and "medic resume" in found["detail"], found
    assert f"failed in {node}: RuntimeError" in listed, listed
    assert done[0] == want, done[2][-2000:]
    assert "Traceback" not in done[2]
    if want == 0:
        assert last_event(fake)["kind"] == "exit" and last_event(fake)["data"]["outcome"] == "verified"
        assert status(capsys, fake.config.session_id)["state"] == "ended"
    # medic's own failures are no decisions: replay re-decides the session around them (was a divergence at each)
    replayed = replay(fake.trace_path)
    assert replayed.first_divergence is None, replayed
