"""The corpus: every decorated or wrapped callable (functions, methods, classes) of the installed speculators
and vLLM in each lab — default, the 0.18.1 variant, the server lab — through the probe medic sends, its
"rejects keyword k" verdict checked against the callable itself (tests/lab_scripts/signature_corpus.py:
``inspect.signature(outer, follow_wrapped=False)`` binding, else a real call that stops at binding).

A false "rejects" is a wrong patch waiting to happen (the dropped ``max_retries=`` of issue 24): there must be
none. The reading the probe replaced (the bare def, the package's own ``__init__``) is measured beside it.
One subprocess per lab, run side by side, each with a fixed share of time for imports.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lab.build import LabPaths
from lab.server_lab import ServerLabPaths
from tools.source_probe import PROBE_TEXT

SCRIPT = Path(__file__).parent / "lab_scripts" / "signature_corpus.py"
IMPORT_SECONDS = 50  # per lab after its first imports (torch), the three labs at once


@pytest.fixture(scope="module")
def corpus(lab: LabPaths, lab_0181: LabPaths, server_lab: ServerLabPaths,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    probe = tmp_path_factory.mktemp("corpus") / "probe.py"
    probe.write_text(PROBE_TEXT)
    pythons = {"default": lab.python, "0.18.1": lab_0181.python, "server": server_lab.python}
    procs = {name: subprocess.Popen([str(py), str(SCRIPT), str(probe), "speculators,vllm", str(IMPORT_SECONDS)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for name, py in pythons.items()}
    out = {}
    for name, proc in procs.items():
        stdout, _ = proc.communicate(timeout=IMPORT_SECONDS + 540)  # a loaded machine: the budget bounds the work
        assert proc.returncode == 0, f"the corpus run in the {name} lab exited {proc.returncode}"
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


def false_rejects(rows: list[list[Any]], column: int) -> list[list[Any]]:
    return [r for r in rows if r[column] is True and r[4] == "accepted"]


def test_no_keyword_is_said_rejected_that_the_callable_takes(corpus: dict[str, dict[str, Any]]) -> None:
    for name, run in corpus.items():
        rows = run["rows"]
        before, after = false_rejects(rows, 3), false_rejects(rows, 2)
        proven = [r for r in rows if r[2] is True]
        print(f"{name}: {run['callables']} callables of {run['targets']} decorated reached, {run['modules_ok']} modules"
              f" ({run['modules_failed']} not importable here), {len(rows)} verdicts checked in {run['seconds']}s; "
              f"false 'rejects' before={len(before)} after={len(after)}; proven rejects={len(proven)} "
              f"({sum(r[4] == 'rejected' for r in proven)} confirmed)")
        assert after == [], f"{name}: {after[:5]}"
        assert run["probe_errors"] == 0
        # not vacuous: both packages were read and the probe still proves rejections the callables confirm
        assert {r[0].split(".")[0] for r in rows} == {"speculators", "vllm"}
        assert sum(r[4] == "rejected" for r in proven) >= 20


def test_the_old_reading_was_wrong_somewhere(corpus: dict[str, dict[str, Any]]) -> None:
    """What the corpus measures is real: the bare-def reading says "rejects" where the callable takes it."""
    assert sum(len(false_rejects(run["rows"], 3)) for run in corpus.values()) > 0
