"""A wrong output is set aside before the next target launch (agent/wrong_output.py), on this machine and over SSH
(the test sshd on loopback): moved whole to a name of its own beside it, never deleted, never over another."""

from __future__ import annotations

from pathlib import Path

from agent.readers.postmortem import postmortem_markdown
from agent.readers.tracefile import read_trace
from agent.record.trace import TraceWriter
from agent.repair.types import OutputFacts
from agent.wrong_output import set_aside, to_set_aside
from tools.host import Host
from tools.redact import Redactor


def test_a_wrong_output_is_moved_beside_itself_under_a_name_no_other_holds(host: Host, tmp_path: Path) -> None:
    output = tmp_path / "hidden_states"
    output.mkdir()
    (output / "hs_0.safetensors").write_bytes(b"wrong")
    assert set_aside(host, str(output), 2) == {"from": str(output), "to": f"{output}.medic-wrong-L2"}
    assert not output.exists() and (tmp_path / "hidden_states.medic-wrong-L2" / "hs_0.safetensors").read_bytes() == (
        b"wrong")
    output.mkdir()  # the same launch's name is taken: the next one is a name of its own
    assert set_aside(host, str(output), 2) == {"from": str(output), "to": f"{output}.medic-wrong-L2.1"}
    assert set_aside(host, str(output), 3) is None  # nothing there to move


def test_only_an_output_whose_values_or_rows_are_wrong_is_set_aside() -> None:
    # medic's own check said no for more than missing rows (values, shapes, token ids, unreadable files)
    assert to_set_aside("/o", OutputFacts(off_layers=(2,)), only_missing=False, own_check=True) == "/o"
    assert to_set_aside("/o", None, only_missing=False, own_check=True) == "/o"
    # rows the job skipped: those there are right, and a resuming job writes only the missing ones
    assert to_set_aside("/o", OutputFacts(missing_sequences=(1,)), only_missing=True, own_check=True) is None
    # the person's validator said no: moved only when medic's check of it measured wrong values or rows
    assert to_set_aside("/o", OutputFacts(short_sequences=(1,)), only_missing=False, own_check=False) == "/o"
    assert to_set_aside("/o", OutputFacts(), only_missing=False, own_check=False) is None
    assert to_set_aside("/o", None, only_missing=False, own_check=False) is None
    assert to_set_aside(None, OutputFacts(off_layers=(2,)), only_missing=False, own_check=True) is None


def test_the_postmortem_says_where_the_wrong_output_went(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path / "aside.jsonl", {"session": "aside"}, Redactor())
    for n in (1, 2):
        extra = {"wrong_output_set_aside": {"from": "/w/hs", "to": "/w/hs.medic-wrong-L1"}} if n == 2 else {}
        w.event("launch", "launch", {"n": n, "kind": "target", "run_dir": f"/w/runs/L{n}", **extra})
        w.event("run_end", "watch", {"outcome": "exited", "exit_code": 0, "seconds": 3.0, "launch": n, "phases": {}})
    w.event("exit", "report", {"outcome": "verified", "detail": "verified by medic's own check"})
    w.close()
    text = postmortem_markdown(read_trace(tmp_path / "aside.jsonl"))
    assert "- the wrong output was set aside before launch L2: `/w/hs` is now `/w/hs.medic-wrong-L1`" in text
