"""Wrong output, whoever judged it (issue 25, item 4). A user's --validate says no in its own words, its passing
lines first: the fault's evidence is its failing lines, and medic's own check of the same output measures which
sequences are short and which layers are off. The prefix-caching repair reads those facts — never the wording of
medic's checker — so the same job is repaired with or without --validate. Real lab env, real outputs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent.codec import fault_from_dict
from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes.preflight import preflight
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from agent.repair.playbooks import load_playbooks
from agent.repair.types import Fault, OutputFacts
from agent.validation import validate_output
from lab.build import RUN_ENV, LabBuilder, LabPaths
from tests.fixtures_lab import ReferenceOutputs
from tools.host import LocalHost
from tools.redact import Redactor

PLAYBOOK = "playbook:prefix-caching-breaks-extraction"
# this checkout's playbooks (an editable install elsewhere may map medic_playbooks to another checkout's)
BOOKS = Path(__file__).resolve().parents[1] / "playbooks"
# what prefix caching does to an extraction: the cached prefix's rows are never captured
SHORTEN = """import sys, torch
records = torch.load(sys.argv[1], weights_only=False)
for r in records[1:]:
    r["hidden_states"] = [t[16:] for t in r["hidden_states"]]
torch.save(records, sys.argv[2])
"""
# a user's validator, in its own words: one line per sequence, "ok" for the good ones
USER_VALIDATOR = """import sys, torch
bad = 0
for i, r in enumerate(torch.load(sys.argv[1], weights_only=False)):
    rows, tokens = r["hidden_states"][0].shape[0], len(r["input_ids"])
    if rows == tokens:
        print(f"ok: seq {i} has {tokens} rows")
    else:
        bad += 1
        print(f"seq {i}: {rows} rows for {tokens} tokens")
print(f"{bad} bad sequence(s)")
sys.exit(1 if bad else 0)
"""


@pytest.fixture(scope="module")
def job(lab: LabPaths, reference_output: ReferenceOutputs, tmp_path_factory: pytest.TempPathFactory) -> LabPaths:
    """A private lab (pristine speculators) whose workdir holds a short output and the user's validator."""
    root = tmp_path_factory.mktemp("wrong-output") / "lab"
    subprocess.run(["cp", "-al", str(lab.root), str(root)], check=True, timeout=300)
    paths = LabPaths(root)
    LabBuilder(paths).reset()
    paths.output.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(paths.python), "-c", SHORTEN, str(reference_output.correct), str(paths.output)],
                   check=True, timeout=300, capture_output=True)
    (paths.work / "my_check.py").write_text(USER_VALIDATOR)
    return paths


def judged(job: LabPaths, tmp_path: Path, validate: list[str] | None) -> tuple[Deps, dict[str, Any], Fault]:
    target = Target(python=str(job.python), workdir=str(job.work), env=dict(RUN_ENV), validate_command=validate,
                    command=["python", "extract.py", "--model", str(job.model()), "--out", str(job.output)])
    deps = Deps(host=LocalHost(), config=SessionConfig(session_id="wrong", target=target),
                engine=RepairEngine(load_playbooks(BOOKS)),
                trace=TraceWriter(tmp_path / "t.jsonl", {"session": "wrong"}, Redactor()))
    state: dict[str, Any] = {"run": {"kind": "target", "n": 1, "launcher": "detached"}}
    state.update(preflight(state, deps))  # type: ignore[arg-type]
    update = validate_output(state, deps)  # type: ignore[arg-type]
    assert update.get("fault"), update
    state.update(update)
    return deps, state, fault_from_dict(update["fault"])


def test_a_user_validator_in_its_own_words_gets_the_same_repair(job: LabPaths, tmp_path: Path) -> None:
    deps, state, fault = judged(job, tmp_path, ["python", "my_check.py", str(job.output)])
    assert fault.message.startswith("seq 1: "), fault.message  # its failing line, not its first ("ok: seq 0 …")
    said = fault.message.splitlines()
    assert said.index("1 bad sequence(s)" if "1 bad" in fault.message else "2 bad sequence(s)") < min(
        i for i, line in enumerate(said) if line.startswith("ok:"))  # what failed before what passed
    assert fault.output is not None and fault.output.short_sequences == (1, 2) and fault.output.off_layers == ()
    found = deps.engine.candidates(deps.context(state), fault)  # type: ignore[arg-type]
    assert [c.origin for c in found][:1] == [PLAYBOOK], [c.origin for c in found]
    assert "+" in found[0].patch.diff and "enable_prefix_caching=False" in found[0].patch.diff


def test_medics_own_check_reports_the_same_facts(job: LabPaths, tmp_path: Path) -> None:
    deps, state, fault = judged(job, tmp_path, None)
    assert fault.output is not None and fault.output.short_sequences == (1, 2)
    assert state["wrong_output"] == str(job.output)  # set aside before the next target launch
    found = deps.engine.candidates(deps.context(state), fault)  # type: ignore[arg-type]
    assert [c.origin for c in found][:1] == [PLAYBOOK]


def test_no_playbook_reads_the_wording_of_medics_checker() -> None:
    """The checker's own sentence without the facts matches nothing; the facts in any words match."""
    book = next(b for b in load_playbooks(BOOKS) if b.id == PLAYBOOK.split(":")[1])
    worded = Fault("validate", "OutputMismatch", "sequence 1 layer 2: shape (30, 128), expected (46, 128)", ())
    assert not book.matches(worded, {"vllm": "0.16.0"})
    facts = Fault("validate", "OutputMismatch", "rows went missing", (), output=OutputFacts(short_sequences=(1,)))
    assert book.matches(facts, {"vllm": "0.16.0"})
    off = Fault("validate", "OutputMismatch", "values off", (), output=OutputFacts(off_layers=(2,)))
    assert not book.matches(off, {"vllm": "0.16.0"})  # wrong values are not what prefix caching does
