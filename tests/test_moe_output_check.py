"""medic's own check of a server job's output (tools/hs_output_check.py) is right for mixture-of-experts models:
a tiny random GPT-OSS and Qwen3-MoE (lab/target/make_moe_model.py), their hidden states written in bf16 by another
implementation's rounding (tests/lab_scripts/moe_hidden_states.py: a router near-tie sends a few tokens to
another expert, 0.04–0.08 off as in vLLM's GPT-OSS), verify; spoiled copies (values, token ids, a short row, a
missing layer, a missing row) still fail. Runs the check as medic does, with the lab's python (torch,
transformers, datasets); no server."""

from __future__ import annotations

import ast
import json
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from lab.build import LabPaths
from tests.fixtures_lab import lab  # noqa: F401  (the session-scoped default lab: its python)
from tools import hs_layouts

REPO = Path(__file__).parents[1]
LAYERS = "1,2,3"
lab_test = pytest.mark.lab


def own_check(python: Path, folder: Path, made: dict[str, Path], *extra: str) -> tuple[int, dict[str, Any]]:
    layouts = json.dumps([{**asdict(layout), "keys": list(layout.keys()), "describe": layout.describe()}
                          for layout in hs_layouts.LAYOUTS])
    done = subprocess.run([str(python), "-", str(folder), "--model", str(made["model"]), "--dataset",
                           str(made["dataset"]), "--layers", LAYERS, "--layouts", layouts, "--json", *extra],
                          input=(REPO / "tools" / "hs_output_check.py").read_text(), capture_output=True, text=True,
                          timeout=900)
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["gpt_oss", "qwen3_moe"])
def moe(request: pytest.FixtureRequest, lab: LabPaths, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
        ) -> dict[str, Any]:
    base = tmp_path_factory.mktemp(request.param)
    made = {"model": base / "model", "dataset": base / "data", "hs": base / "hs"}
    for argv in ([str(REPO / "lab" / "target" / "make_moe_model.py"), str(made["model"]), "--arch", request.param],
                 [str(REPO / "tests" / "lab_scripts" / "moe_hidden_states.py"), str(made["model"]),
                  str(made["dataset"]), str(made["hs"]), "--layers", LAYERS, "--rows", "6", "--tokens", "32"]):
        done = subprocess.run([str(lab.python), *argv], capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-3000:]
    return {"arch": request.param, "python": lab.python, "made": made, "base": base}


@lab_test
def test_output_right_to_bf16_precision_verifies_with_its_outliers_reported(moe: dict[str, Any]) -> None:
    code, report = own_check(moe["python"], moe["made"]["hs"], moe["made"])
    assert code == 0 and report["verified"] is True, report["problems"]
    assert report["job_dtype"] == "bfloat16" and set(report["median_error_per_layer"]) == {"1", "2", "3"}
    assert all(0 < m < 0.01 for m in report["median_error_per_layer"].values()), report["median_error_per_layer"]
    if moe["arch"] == "gpt_oss":  # its router's near-ties: tokens over the old bound, each excused and listed
        assert report["outliers"] and all(o["excused"] for o in report["outliers"]), report["outliers"]
        assert max(o["error"] / o["bound"] for o in report["outliers"]) > 1


@lab_test
@pytest.mark.parametrize("moe", ["gpt_oss"], indirect=True)  # the near-ties are GPT-OSS's
def test_the_server_labs_own_checker_agrees(moe: dict[str, Any]) -> None:
    made = moe["made"]
    done = subprocess.run([str(moe["python"]), str(REPO / "lab" / "target" / "check_server.py"), str(made["hs"]),
                           "--model", str(made["model"]), "--dataset", str(made["dataset"]), "--layers", LAYERS],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "VERIFIED: 6 rows" in done.stdout, done.stdout + done.stderr[-2000:]


@lab_test
@pytest.mark.parametrize("moe", ["gpt_oss"], indirect=True)  # one architecture's: rows and layers are judged alike
def test_spoiled_copies_still_fail(moe: dict[str, Any]) -> None:
    spoiled = moe["base"] / "hs-faults"
    done = subprocess.run([str(moe["python"]), str(REPO / "tests" / "lab_scripts" / "corrupt_hs_output.py"),
                           str(moe["made"]["hs"]), str(spoiled), "faults"], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    code, report = own_check(moe["python"], spoiled, moe["made"])
    assert code == 1 and report["verified"] is False
    problems = "\n".join(report["problems"])
    for said in ("row 0 layer 1: max abs error", "row 1: token_ids differ", "row 2: hidden_states shape",
                 "row 3: hidden_states 2 layer slots", "row 4: no hs_4.safetensors"):
        assert said in problems, problems


def test_both_checks_judge_precision_with_the_same_code() -> None:
    """Each check is sent alone on stdin, so the judging functions are copies: they may not drift apart."""
    def functions(path: Path) -> dict[str, str]:
        tree = ast.parse(path.read_text())
        return {n.name: ast.dump(n) for n in tree.body if isinstance(n, ast.FunctionDef)
                and n.name in ("token_errors", "judge_layer", "perturbed", "job_dtype")}

    served, in_process = functions(REPO / "tools" / "hs_output_check.py"), functions(REPO / "tools" / "output_check.py")
    lab_checker = functions(REPO / "lab" / "target" / "check_server.py")
    assert len(served) == 4 and served == in_process == lab_checker
