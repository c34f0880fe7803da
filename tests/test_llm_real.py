"""The LLM path against a real model: SmolLM2-135M-Instruct served by the lab's own vLLM (tests/fixtures_llm.py).

The server refuses tool calls for this model (no tool parser fits it), so medic asks for a JSON line edit in the
content, held to a JSON schema by vLLM's structured outputs. Whatever the model answers, the session ends with
a named outcome, the trace holds the exchange, a wrong edit never stays on disk, and replay needs no server.
A reply the model could not finish within its token limit is turned down with a named reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.config import SessionConfig
from agent.llm.chat import ChatModel, LLMConfig
from agent.llm.judge import REJECTIONS
from agent.llm.repair import llm_candidates
from agent.outcomes import OUTCOMES
from agent.readers.replay import replay
from agent.repair.types import Fault, FrameRef, RepairContext
from agent.session import run_session
from agent.session_files import save_config
from tests.fixtures_llm import RealLLM, real_llm  # noqa: F401  (the real_llm fixture)
from tests.test_llm_session import CALLER, FIXED, make_target
from tools.host import LocalHost


@pytest.fixture(scope="module")
def session(real_llm: RealLLM, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("real-llm")
    mp = pytest.MonkeyPatch()
    mp.setenv("MEDIC_HOME", str(tmp / "home"))
    mp.setenv("OPENAI_API_KEY", "local-server")
    try:
        target, caller = make_target(tmp)
        config = SessionConfig(session_id="real-llm-1", target=target, scan=False, traces_dir=str(tmp / "traces"),
                               llm={"base_url": real_llm.base_url, "model": real_llm.model, "timeout": "240",
                                    "max_reply_tokens": "120", "server_log": str(real_llm.log)})
        save_config(config)
        outcome, state = run_session(config)
    finally:
        mp.undo()
    trace = tmp / "traces" / "real-llm-1.jsonl"
    events = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    return {"outcome": outcome, "state": state, "caller": caller, "trace": trace, "events": events, "tmp": tmp}


def test_a_real_answer_ends_in_a_named_outcome_with_the_exchange_in_the_trace(session: dict[str, Any]) -> None:
    assert session["outcome"] in OUTCOMES, session["state"].get("outcome_detail")
    llm = [e["data"] for e in session["events"] if e["kind"] == "llm"]
    assert llm, "the model was never asked"
    first = llm[0]
    assert first["protocol"] == "json" and "tool" in first["protocol_note"]  # the server's own refusal
    assert first["calls"] >= 2 and first["completion_tokens"] > 0
    replies = [m for m in first["transcript"] if m.get("role") == "assistant" and m.get("content")]
    assert replies, "no answer of the model is in the trace"
    assert all(r["reason"] in REJECTIONS for e in llm for r in e["rejections"])
    # every answer is accounted for: a candidate, or a named rejection
    assert all(e["candidates"] or e["rejections"] for e in llm)
    # a model patch is on disk only in a verified session; otherwise the caller is as it was
    text = session["caller"].read_text()
    assert text == (FIXED if session["outcome"] == "verified" else CALLER), text


def test_replay_of_the_llm_session_needs_no_server(session: dict[str, Any]) -> None:
    result = replay(session["trace"])  # the fixture's server may be gone: nothing here asks it
    assert result.first_divergence is None and result.events_compared > 0


def test_a_reply_cut_at_its_token_limit_is_rejected_by_name(real_llm: RealLLM, tmp_path: Path) -> None:  # noqa: F811
    target, caller = make_target(tmp_path)
    site = str(caller.parent.parent)
    ctx = RepairContext(host=LocalHost(), python=target.python, roots=(site, target.workdir), workdir=target.workdir,
                        fixable_packages=("fakecaller",), library_packages=("fakelib",), site_packages=(site,))
    message = "speed 'fast' was retired in 2.0; the fast path is now called \"quick\""
    fault = Fault(stage="crash", exc_type="ValueError", message=message,
                  frames=(FrameRef(str(caller), 5, "run"), FrameRef(f"{site}/fakelib/__init__.py", 3, "compute")))
    model = ChatModel(LLMConfig(base_url=real_llm.base_url, model=real_llm.model, api_key="local-server",
                                protocol="json", max_reply_tokens=4, timeout=120))
    outcome = llm_candidates(ctx, fault, model)
    assert outcome.candidates == [] and outcome.calls == 2  # two attempts, both cut off
    assert [r["reason"] for r in outcome.rejections] == ["truncated", "truncated"]
    assert caller.read_text() == CALLER  # nothing was written
