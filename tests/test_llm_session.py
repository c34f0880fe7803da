"""A whole session where only the model can help: no playbook and no derived repair matches the fault, so the
graph asks the LLM (a scripted OpenAI-protocol server on 127.0.0.1, through the real openai client), applies
its patch through the same validate / apply / verify path, relaunches, and verifies the output."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import SessionConfig, Target
from agent.session import run_session
from agent.session_files import save_config
from tests.openai_server import (
    ScriptedOpenAIServer,
    call,
    openai_server_fixture,  # noqa: F401  (the openai_server fixture)
)

KEY = "sk-session-test-9a8b7c6d5e4f3a2b"
LIBRARY = (
    "def compute(x, *, speed='normal'):\n"
    "    if speed not in ('normal', 'quick'):\n"
    "        raise ValueError(f'speed {speed!r} was retired in 2.0; the fast path is now called \"quick\"')\n"
    "    return f'{x}:{speed}'\n"
)
CALLER = "import fakelib\n\n\ndef run(x):\n    return fakelib.compute(x, speed='fast')\n"
FIXED = CALLER.replace("speed='fast'", "speed='quick'")


def make_target(tmp_path: Path) -> tuple[Target, Path]:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    py = tmp_path / "venv" / "bin" / "python"
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    for name, text in (("fakelib", LIBRARY), ("fakecaller", CALLER)):
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    (work / "driver.py").write_text("import pathlib\nimport fakecaller\n\n"
                                    "pathlib.Path('out.txt').write_text(fakecaller.run(1))\n")
    check = "import pathlib, sys; sys.exit(0 if pathlib.Path('out.txt').read_text() == '1:quick' else 1)"
    target = Target(python=str(py), workdir=str(work), command=[str(py), "driver.py"],
                    validate_command=[str(py), "-c", check], library_packages=["fakelib"],
                    fixable_packages=["fakecaller"])
    return target, site / "fakecaller" / "__init__.py"


def test_a_fault_only_the_model_can_fix_is_fixed_and_verified(
    openai_server: ScriptedOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    target, caller = make_target(tmp_path)
    diff = "".join(difflib.unified_diff(CALLER.splitlines(True), FIXED.splitlines(True),
                                        f"a{caller}", f"b{caller}"))
    openai_server.queue(
        call("view_lines", {"path": str(caller), "start": 1, "end": 10}),
        call("propose_patch", {"diff": diff, "rationale": "fakelib 2.0 renamed speed 'fast' to 'quick'",
                               "checks": []}),
    )
    config = SessionConfig(session_id="llm-1", target=target, scan=False, traces_dir=str(tmp_path / "traces"),
                           llm={"base_url": openai_server.base_url, "model": "scripted"})
    save_config(config)

    outcome, state = run_session(config)

    assert outcome == "verified", state.get("outcome_detail")
    assert caller.read_text() == FIXED
    assert [p["origin"] for p in state["patches"]] == ["llm"]
    assert len(openai_server.requests) == 2  # one tool call, one proposal: nothing retried, nothing extra
    trace_text = (tmp_path / "traces" / "llm-1.jsonl").read_text()
    events = [json.loads(line) for line in trace_text.splitlines()[1:]]
    usage = [e["data"] for e in events if e["kind"] == "llm"]
    assert usage and usage[0]["calls"] == 2 and usage[0]["transcript"]
    assert [e["data"]["outcome"] for e in events if e["kind"] == "exit"] == ["verified"]
    assert KEY not in trace_text  # the key never reaches the trace
