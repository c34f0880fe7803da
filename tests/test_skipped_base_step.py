"""A host's subclass overrides a method of the library's main class and leaves out the step a flag needs
(agent/repair/derived_overrides.py).

vLLM 0.20–0.21's CPU runner overrides ``load_model`` without telling the model which auxiliary layers to return;
the GPU runner's ``_dummy_run`` it inherits then unpacks one tensor as two ("too many values to unpack"). The
server lab is vLLM 0.32.0, where both runners call ``_setup_eagle3_aux_hidden_state_outputs()``: a private copy
has the CPU runner's call taken out, the 0.21 shape, and the fault is read from the log that copy's server wrote on
this machine (tests/data/server_logs/server_skipped_aux_layers.log, its lab's path written ``{LAB}``). The repair
gives the override the base class's call; the same derivation on 0.21.0's own source (where the step is an
``if self.use_aux_hidden_state_outputs:`` block needing an import) is the space bench's pair 0.9.0:0.21.0.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from agent.repair.derived_overrides import ORIGIN, overridden_without, skipped_base_step, steps_of
from agent.repair.edits import Source
from agent.repair.engine import RepairEngine
from agent.repair.types import Fault
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import logged_fault
from tests.fixtures_server import server_repair_context as context
from tools.patches import apply_patch

RUNNER = "vllm/v1/worker/cpu_model_runner.py"
STEP = "\n        self._setup_eagle3_aux_hidden_state_outputs()\n"


def as_in_021(lab: ServerLabPaths) -> Path:
    """The CPU runner's load_model without the step (written by rename: the copy's files are hard links)."""
    runner = lab.site_packages() / RUNNER
    text = runner.read_text()
    assert text.count(STEP) == 1
    fresh = runner.with_suffix(".new")
    fresh.write_text(text.replace(STEP, "\n"))
    os.replace(fresh, runner)
    return runner


def recorded_fault(lab: ServerLabPaths) -> Fault:
    return logged_fault(lab, "server_skipped_aux_layers.log")


def test_the_override_gets_the_step_its_base_takes_for_the_flag(private_server_lab: ServerLabPaths,
                                                                tmp_path: Path) -> None:
    runner = as_in_021(private_server_lab)
    fault = recorded_fault(private_server_lab)
    assert fault.message.startswith("too many values to unpack") and fault.frames[-1].func == "_dummy_run"
    ctx = context(private_server_lab)
    found = RepairEngine(playbooks=[]).candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN]
    (edit,) = found[0].patch.files
    assert edit.path == str(runner)
    added = [line[1:].strip() for line in edit.diff.splitlines() if line.startswith("+") and not line.startswith("++")]
    assert added == ["", "self._setup_eagle3_aux_hidden_state_outputs()"]
    assert "overrides load_model() without super()" in found[0].rationale
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    after = Source(str(runner), runner.read_text())
    load = next(n for n in ast.walk(after.tree) if isinstance(n, ast.FunctionDef) and n.name == "load_model")
    assert ast.unparse(load.body[-1]) == "self._setup_eagle3_aux_hidden_state_outputs()"
    # with the step back, the override is no longer one that leaves the flag out: nothing more to propose
    assert skipped_base_step(context(private_server_lab), fault) == []


def test_no_step_where_the_override_calls_super_or_the_base_takes_two() -> None:
    base = Source("/v/base.py", '''
class Base:
    def load(self):
        if self.flag:
            self.a = 1
        self.helper()

    def helper(self):
        if self.flag:
            pass

    def run(self):
        if self.flag:
            x, _ = self.out
''')
    cls = next(n for n in base.tree.body if isinstance(n, ast.ClassDef))
    assert len(steps_of(base, cls, "load", "flag")) == 2  # two steps: the repair proposes none
    sub = ast.parse('''
class Sub(Base):
    def load(self):
        super().load()

    def run(self):
        pass
''').body[0]
    assert isinstance(sub, ast.ClassDef)
    assert overridden_without(sub, cls, "flag") == ["run"]  # load calls super(); run is the base's flag reader
