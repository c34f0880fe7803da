"""A repair's evidence is how the library itself calls a function: every call in the library, not the first few.

vLLM 0.26 has 68 ``collective_rpc`` calls and the ones passing ``unique_reply_rank`` sit in a file that sorts last;
a reader capped at 50 saw none of them, and the return-shape drift went unnamed (speculators 0.3.0 then crashed
on ``if not aux_hidden_states``). Here a library package on PYTHONPATH, read by a real probe process, has sixty
callers before the one that matters."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.repair.edits import Source
from agent.repair.engine import RepairEngine
from agent.repair.scan_rules import shape_drift
from agent.repair.types import RepairContext
from tests.fixtures_library import made_library

FIXABLE = '''
class Generator:
    def generate(self):
        captured_states_list = self.executor.collective_rpc("_get_captured_states", unique_reply_rank=0)
        aux_hidden_states = captured_states_list[0]
        if not aux_hidden_states:
            raise RuntimeError("nothing captured")
        return aux_hidden_states
'''
EXECUTOR = '''
class Executor:
    def collective_rpc(self, method, unique_reply_rank=None):
        replies = [method]
        return replies[unique_reply_rank] if unique_reply_rank is not None else replies

    def execute_model(self, output):
        return self.collective_rpc("execute_model", unique_reply_rank=self.output_rank)
'''


@pytest.fixture
def context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RepairContext, Path]:
    # sixty calls that pass no keyword, in a module that sorts before the executor's
    workers = "def everywhere(ex):\n" + "".join(f"    ex.collective_rpc('method_{i}')\n" for i in range(60))
    made = made_library(tmp_path, monkeypatch, "shapelib",
                        {"__init__.py": "", "a_workers.py": workers, "z_executor.py": EXECUTOR}, FIXABLE)
    return made.ctx, made.fixable


def test_the_one_caller_past_the_first_fifty_is_evidence(context) -> None:
    ctx, gen = context
    [fault] = shape_drift(ctx, [Source(str(gen), gen.read_text())])
    assert "collective_rpc(unique_reply_rank=...) returns a single value" in fault.summary, fault.summary
    assert "z_executor.py" in fault.log_excerpt, fault.log_excerpt
    [cand, *_] = RepairEngine().candidates(ctx, fault)
    assert cand.origin == "derived:changed_return_shape", cand.origin
    assert "-        aux_hidden_states = captured_states_list[0]\n" in cand.patch.diff, cand.patch.diff


def test_a_caller_that_indexes_the_result_is_counted_too(context) -> None:
    """The whole library is read both ways: one caller past the first fifty that indexes the reply leaves the
    evidence mixed, and nothing is named."""
    ctx, gen = context
    executor = Path(ctx.roots[0]).parent / "lib" / "site-packages" / "shapelib" / "z_executor.py"
    executor.write_text(EXECUTOR + "\n\ndef first(ex):\n    return ex.collective_rpc('m', unique_reply_rank=0)[0]\n")
    assert shape_drift(ctx, [Source(str(gen), gen.read_text())]) == []
