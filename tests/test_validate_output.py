"""Wrong output is a fault. The validate node on real validators and real outputs: medic's own check run by the
lab's python (real torch and transformers, the lab's tiny model), a plain exit-code validator, and a playbook
that places its patch for a wrong output of a clean run (no traceback) in the code the driver reaches."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from agent.codec import fault_from_dict
from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes.validate import validate
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from lab.build import RUN_ENV, LabPaths
from tests.fixtures_lab import GEN, ReferenceOutputs
from tools.host import LocalHost
from tools.redact import Redactor
from tools.validate_output import builtin_check, evidence_lines, locate

SHORT = """import sys, torch
records = torch.load(sys.argv[1], weights_only=False)
for r in records:  # what prefix caching does to an extractor: the cached prefix's rows never come back
    r["hidden_states"] = [t[16:] for t in r["hidden_states"]]
torch.save(records, sys.argv[2])
"""


def deps_for(tmp_path: Path, python: str, command: list[str], *, validate_command: list[str] | None = None,
             **target: Any) -> Deps:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    config = SessionConfig(session_id="v", target=Target(python=python, workdir=str(work), command=command,
                                                         validate_command=validate_command, env=dict(RUN_ENV),
                                                         **target))
    trace = TraceWriter(tmp_path / "t.jsonl", {"session": "v"}, Redactor())
    return Deps(host=LocalHost(), config=config, engine=RepairEngine(), trace=trace)


def target_state(**preflight: Any) -> dict[str, Any]:
    return {"run": {"n": 1, "kind": "target", "launcher": "detached"}, "faults": [], "preflight": preflight}


def test_a_plain_validator_that_fails_is_a_fault_quoting_its_failing_lines_first(tmp_path: Path) -> None:
    checker = tmp_path / "verify.py"
    checker.write_text("import sys\nfor i in range(30):\n    print(f'sequence {i}: ok')\n"
                       "print('sequence 30: rows 8, expected 24', file=sys.stderr)\nprint('done')\nsys.exit(1)\n")
    deps = deps_for(tmp_path, sys.executable, ["python", "extract.py"], validate_command=["python", str(checker)])
    out = validate(target_state(), deps)  # type: ignore[arg-type]
    assert out.get("outcome") is None, out.get("outcome_detail")
    fault = fault_from_dict(out["fault"])
    assert fault.stage == "validate" and fault.exc_type == "OutputMismatch"
    assert fault.message.splitlines()[0] == "sequence 30: rows 8, expected 24", fault.message
    assert "sequence 30: rows 8, expected 24" in fault.summary
    assert "(stdout) sequence 0: ok" in fault.log_excerpt  # the whole output is kept, after what failed


def test_a_fault_summary_quotes_the_validators_verdict_not_its_warnings(tmp_path: Path) -> None:
    """Libraries warn on stderr in words that look like failures ("invalid", "expected", "deprecated"): the
    summary a person reads is the validator's verdict; the warnings stay in the evidence and the excerpt."""
    checker = tmp_path / "verify.py"
    checker.write_text("import logging, sys, warnings\n"
                       "warnings.warn('load(strict=False) is deprecated and invalid in 3.0: expected strict=True',"
                       " DeprecationWarning, stacklevel=1)\n"
                       "logging.warning('the tokenizer is missing a pad token: expected one')\n"
                       "print('sequence 3 layer 4: max abs error 0.9 > 0.05 x scale 1.0')\nsys.exit(1)\n")
    deps = deps_for(tmp_path, sys.executable, ["python", "extract.py"], validate_command=[
        "python", "-W", "always", str(checker)])
    out = validate(target_state(), deps)  # type: ignore[arg-type]
    fault = fault_from_dict(out["fault"])
    assert fault.message == "sequence 3 layer 4: max abs error 0.9 > 0.05 x scale 1.0", fault.message
    assert "Warning" not in fault.summary and "WARNING" not in fault.summary, fault.summary
    assert "DeprecationWarning" in fault.log_excerpt  # kept as what the validator printed, not as its verdict


def test_failing_lines_come_first_whatever_the_validator_prints() -> None:
    stdout = "layer 2: ok\nlayer 4: ok\nNOT VERIFIED: 2 sequences\n"
    stderr = 'Traceback (most recent call last):\n  File "v.py", line 3, in <module>\nAssertionError: layer 6 differs\n'
    lines = evidence_lines({}, stdout, stderr)
    assert lines[:2] == ["AssertionError: layer 6 differs", "NOT VERIFIED: 2 sequences"], lines
    assert lines.index("layer 2: ok") > 1
    problem = "sequence 0 layer 2: shape (8, 128), expected (24, 128)"
    quoted = evidence_lines({"problems": [problem]}, f"ok: sequence 1\nWRONG: {problem}\n", "")
    assert quoted == [problem, "ok: sequence 1"], quoted  # "WRONG: <problem>" says nothing more


def test_without_a_validator_or_an_output_to_read_the_job_stays_unverified(tmp_path: Path) -> None:
    deps = deps_for(tmp_path, sys.executable, ["python", "extract.py", "--out", "missing.pt"])
    out = validate(target_state(), deps)  # type: ignore[arg-type]
    assert out["outcome"] == "unverified"
    assert "output file" in out["outcome_detail"] and "model folder" in out["outcome_detail"]


# -- medic's own check, in the lab's env ---------------------------------------------------------------------
pytestmark_lab = pytest.mark.lab


@pytest.fixture(scope="module")
def outputs(reference_output: ReferenceOutputs, lab: LabPaths, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("outputs")
    short, garbage = folder / "short.pt", folder / "garbage.pt"
    subprocess.run([str(lab.python), "-c", SHORT, str(reference_output.correct), str(short)], check=True,
                   timeout=300, capture_output=True)
    garbage.write_text("not a torch file")
    return {"correct": reference_output.correct, "wrong_shape": reference_output.wrong_shape,
            "wrong_value": reference_output.wrong_value, "short": short, "garbage": garbage}


@pytestmark_lab
def test_the_job_command_line_names_the_output_and_the_model(lab: LabPaths, outputs: dict[str, Path]) -> None:
    host, model = LocalHost(), lab.model("tiny")
    workdir = str(outputs["correct"].parent)
    command = ["python", "extract.py", "--model", str(model), "--out=correct.pt", "--layers", "2,4,6"]
    assert locate(host, command, workdir) == (str(outputs["correct"]), str(model))
    bare = ["python", "x.py", str(model), "wrong_value.pt"]  # no option names them: an existing .pt, a model folder
    assert locate(host, bare, workdir) == (str(outputs["wrong_value"]), str(model))
    assert isinstance(builtin_check(host, str(lab.python), ["python", "x.py"], workdir), str)


@pytestmark_lab
@pytest.mark.parametrize(("name", "outcome", "first"), [
    ("correct", "verified", None),
    ("wrong_shape", "fault", "sequence 0 layer 2: shape (128,), expected ("),
    ("wrong_value", "fault", "sequence 0 layer 2: max abs error"),
    ("garbage", "unverified", None),
])
def test_medic_checks_the_output_itself_when_no_validator_is_given(
    lab: LabPaths, outputs: dict[str, Path], tmp_path: Path, name: str, outcome: str, first: str | None
) -> None:
    deps = deps_for(tmp_path, str(lab.python), [str(lab.python), "extract.py", "--out", str(outputs[name])],
                    model_dir=str(lab.model("tiny")))
    out = validate(target_state(), deps)  # type: ignore[arg-type]
    if outcome == "fault":
        fault = fault_from_dict(out["fault"])
        assert fault.stage == "validate" and fault.message.startswith(first), fault.message  # type: ignore[arg-type]
    else:
        assert out["outcome"] == outcome, out.get("outcome_detail")
        assert "medic's own check" in out["outcome_detail"]


@pytestmark_lab
def test_a_playbook_places_its_patch_for_a_wrong_output_of_a_clean_run(
    speculators_copy, lab: LabPaths, outputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows missing from every sequence, no traceback anywhere: the prefix-caching playbook still finds the
    caller's CacheConfig(...) in the speculators code the user's driver imports."""
    ctx, site = speculators_copy
    for package in ("speculators", "speculators/data_generation"):  # the copy is found before the lab's own
        (site / package / "__init__.py").touch()
    monkeypatch.setenv("PYTHONPATH", str(site))
    deps = deps_for(tmp_path, str(lab.python), [str(lab.python), "extract.py", "--model", str(lab.model("tiny")),
                                                "--out", str(outputs["short"])])
    shutil.copy(lab.driver, tmp_path / "work" / "extract.py")  # the user's real driver
    state = target_state(roots=[*ctx.roots, deps.config.target.workdir], site_packages=list(ctx.site_packages))
    out = validate(state, deps)  # type: ignore[arg-type]
    fault = fault_from_dict(out["fault"])
    assert fault.frames == () and fault.caller_frames == ()
    assert str(site / GEN) in fault.reach, fault.reach
    [cand] = deps.engine.candidates(deps.context(state), fault)  # type: ignore[arg-type]
    assert cand.origin == "playbook:prefix-caching-breaks-extraction"
    assert [f.path for f in cand.patch.files] == [str(site / GEN)]
    assert "+            enable_prefix_caching=False," in cand.patch.diff


def test_the_check_ships_with_medic() -> None:
    """Package data of medic's own package, read the way an installed wheel reads it."""
    script = resources.files("tools").joinpath("output_check.py").read_text(encoding="utf-8")
    compile(script, "output_check.py", "exec")


def test_an_output_older_than_the_launch_is_never_verified(tmp_path: Path) -> None:
    """A job that exits 0 without writing leaves the last run's file (the canary's, say): even a validator that
    passes it is not asked, and the fault says why. Both times are the host's (output mtime vs the run's pid)."""
    import os
    import time

    out = tmp_path / "work" / "out.pt"
    out.parent.mkdir()
    out.write_bytes(b"the canary's output")
    os.utime(out, (time.time() - 600, time.time() - 600))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "pid").write_text("1234")
    deps = deps_for(tmp_path, sys.executable, ["python", "extract.py", "--out", str(out)],
                    validate_command=["python", "-c", "print('all good')"])
    state = {**target_state(), "run": {"n": 2, "kind": "target", "launcher": "detached", "run_dir": str(run_dir)}}
    got = validate(state, deps)  # type: ignore[arg-type]
    assert got.get("outcome") is None, got.get("outcome_detail")
    fault = fault_from_dict(got["fault"])
    assert fault.message.startswith(f"the job exited 0 but did not write its output: {out} is older"), fault.message
    out.write_bytes(b"this launch's output")  # written after the pid file: the validator is asked, and passes
    assert validate(state, deps)["outcome"] == "verified"  # type: ignore[arg-type]


def test_medic_gives_its_check_the_layer_ids_the_job_names(tmp_path: Path) -> None:
    """An output without ``layer_ids``: the job's --layers (or its driver's argparse default) names them, so the
    check labels each tensor by its id instead of by the reference layer it happens to be nearest to."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "out.pt").write_bytes(b"")
    (tmp_path / "extract.py").write_text('import argparse\np = argparse.ArgumentParser()\n'
                                         'p.add_argument("--layers", default="2,4,6")\n')
    host, job = LocalHost(), ["python", "extract.py", "--model", "m", "--out", "out.pt"]

    def layers(command: list[str]) -> list[str]:
        check = builtin_check(host, sys.executable, command, str(tmp_path))
        assert not isinstance(check, str), check
        return check.argv[check.argv.index("--layers") + 1:] if "--layers" in check.argv else []

    assert layers([*job, "--layer-ids", "1", "3", "5"]) == ["1,3,5"]
    assert layers([*job, "--target-layer-ids=7,8"]) == ["7,8"]
    assert layers(job) == ["2,4,6"]  # the driver's own default
    (tmp_path / "extract.py").write_text("print('no options')\n")
    assert layers(job) == []  # nothing names them: the check matches each tensor to its nearest layer


REPEATED = """import sys, torch
records = torch.load(sys.argv[1], weights_only=False)
for r in records:  # the first layer saved in every slot, and no layer ids in the file
    r["hidden_states"] = [r["hidden_states"][0]] * len(r["hidden_states"])
    del r["layer_ids"]
torch.save(records, sys.argv[2])
"""


@pytestmark_lab
def test_slots_that_all_hold_one_layer_are_wrong_and_named_by_their_place(
        lab: LabPaths, outputs: dict[str, Path], tmp_path: Path) -> None:
    """Without ids, each tensor matches the reference layer nearest to it: three copies of layer 2 used to pass,
    each labelled "layer 2". They are one layer saved three times: wrong, and said per slot."""
    repeated = tmp_path / "repeated.pt"
    subprocess.run([str(lab.python), "-c", REPEATED, str(outputs["correct"]), str(repeated)], check=True,
                   timeout=300, capture_output=True)
    deps = deps_for(tmp_path, str(lab.python), [str(lab.python), "x.py", "--out", str(repeated)],
                    model_dir=str(lab.model("tiny")))
    out = validate(target_state(), deps)  # type: ignore[arg-type]
    fault = fault_from_dict(out["fault"])
    assert "sequence 0: slots 0, 1, 2 all hold layer 2's values" in fault.message, fault.message
