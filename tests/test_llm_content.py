"""The JSON-in-content protocol and what a wrong model edit costs, through a scripted OpenAI-protocol server (fast).

The endpoint refuses tools (HTTP 400, as vLLM does without a tool parser), so medic asks for a JSON line edit held
to a schema. A first edit that runs but writes nothing (exit 0, wrong output) is reverted by the next
validation, a second that is not JSON is rejected by name, a third fixes the job: the session ends verified,
with only the right edit on disk, and its replay agrees with no server at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import SessionConfig
from agent.readers.replay import replay
from agent.session import run_session
from agent.session_files import save_config
from tests.openai_server import (
    Reply,
    ScriptedOpenAIServer,
    Status,
    openai_server_fixture,  # noqa: F401  (the openai_server fixture)
    say,
)
from tests.test_llm_session import CALLER, FIXED, make_target


def edit(line: str, new_line: str) -> Reply:
    return say(json.dumps({"line": line, "new_line": new_line, "reason": "scripted"}))


def test_a_wrong_edit_is_reverted_garbage_is_named_and_the_right_edit_is_verified(
    openai_server: ScriptedOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    target, caller = make_target(tmp_path)
    refusal = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    openai_server.queue(
        Status(400, message=refusal),
        edit("fakecaller/__init__.py:5", "return None"),  # runs, exits 0, writes no output: wrong
        say("the fix is to use quick"),  # not JSON
        edit("fakecaller/__init__.py:5", "return fakelib.compute(x, speed='quick')"),
    )
    config = SessionConfig(session_id="llm-json", target=target, scan=False, traces_dir=str(tmp_path / "traces"),
                           llm={"base_url": openai_server.base_url, "model": "scripted"})
    save_config(config)

    outcome, state = run_session(config)

    assert outcome == "verified", state.get("outcome_detail")
    assert caller.read_text() == FIXED != CALLER
    body = openai_server.requests[1].body
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["line"]["enum"][0] == "fakecaller/__init__.py:5"  # the caller first, not the lib
    assert body["max_completion_tokens"] > 0  # every JSON request is bounded
    trace = tmp_path / "traces" / "llm-json.jsonl"
    events = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    kinds = [e["kind"] for e in events]
    assert kinds.count("applied") == 2 and kinds.count("reverted") == 1
    asked = [e["data"] for e in events if e["kind"] == "llm"]
    assert asked[0]["protocol"] == "json" and "tool-call-parser" in asked[0]["protocol_note"]
    assert [r["reason"] for a in asked for r in a["rejections"]] == ["not_json"]
    assert replay(trace).first_divergence is None
