"""The model endpoint: one OpenAI-compatible chat client with budgets, and errors a person can act on.

There is exactly one retry layer, the openai client's own (``max_retries``): it retries connection errors,
408/409/429 (honouring Retry-After) and 5xx, and never 400/401/403. Adding another layer would multiply
the attempts and ignore Retry-After. Budgets count what this process asked for (calls, tokens), so a
confused model loop stops instead of spending without limit.

The API key is a ``SecretStr``: it is handed to the client and never formatted into a message or a log.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

import openai
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from agent.llm import endpoint
from tools.errors import LLMError

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1"


class LLMConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    api_key: SecretStr | None = None
    timeout: float = Field(default=120.0, gt=0)  # seconds per HTTP attempt
    max_retries: int = Field(default=2, ge=0)  # the client's retries after the first attempt
    max_calls: int = Field(default=40, ge=1)  # chat requests per ChatModel
    max_tokens: int = Field(default=400_000, ge=1)  # prompt + completion tokens per ChatModel
    max_reply_tokens: int | None = Field(default=None, ge=1)  # per reply; None leaves it to the server
    # how the model answers: "tools" (function calls), "json" (one JSON edit in the content, held to a JSON schema
    # by the server's structured outputs), "auto" (tools, and json when the server refuses the tool request)
    protocol: Literal["auto", "tools", "json"] = "auto"
    # the log of the server behind base_url when medic (or its bench) started it: a dead engine's fatal line
    server_log: str | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> LLMConfig:
        """OPENAI_BASE_URL, OPENAI_API_KEY and MEDIC_LLM_MODEL, then ``overrides`` (None means "not set")."""
        values: dict[str, Any] = {}
        for name, var in (
            ("base_url", "OPENAI_BASE_URL"),
            ("api_key", "OPENAI_API_KEY"),
            ("model", "MEDIC_LLM_MODEL"),
        ):
            if os.environ.get(var):
                values[name] = os.environ[var]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def endpoint(self) -> str:
        """``base_url`` without any user:password part, for messages."""
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model wrote it (it may be malformed)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ChatReply:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation (and the transcript)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


class RequestRejected(LLMError):
    """The endpoint refused the request itself (HTTP 400/422): a parameter it does not support, in its own words."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class ChatModel:
    """One endpoint, one model, one budget. ``chat`` raises ``LLMError`` and nothing else."""

    def __init__(self, config: LLMConfig) -> None:
        if config.api_key is None:
            raise LLMError(
                "no API key for the model endpoint: set OPENAI_API_KEY "
                "(any non-empty value for a local server)"
            )
        self.config = config
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.tools_refused = ""  # the endpoint's words when it refused a tool request: JSON from then on
        self._client = openai.OpenAI(
            api_key=config.api_key.get_secret_value(),
            base_url=config.base_url,
            timeout=config.timeout,
            max_retries=config.max_retries,
        )

    def __repr__(self) -> str:
        return (
            f"ChatModel(model={self.config.model!r}, endpoint={self.config.endpoint!r}, calls={self.calls})"
        )

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def _check_budget(self) -> None:
        if self.calls >= self.config.max_calls:
            raise LLMError(
                f"budget of {self.config.max_calls} model calls is spent; raise llm.max_calls to allow more"
            )
        if self.tokens >= self.config.max_tokens:
            raise LLMError(
                f"budget of {self.config.max_tokens} model tokens is spent ({self.tokens} used); "
                "raise llm.max_tokens to allow more"
            )

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        response_format: Mapping[str, Any] | None = None,
        max_reply_tokens: int | None = None,
    ) -> ChatReply:
        self._check_budget()
        self.calls += 1  # counted before the request: a failed call still spent the endpoint's time
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = list(tools)
        if response_format:
            extra["response_format"] = dict(response_format)
        if max_reply_tokens or self.config.max_reply_tokens:
            extra["max_completion_tokens"] = max_reply_tokens or self.config.max_reply_tokens
        try:
            completion = self._client.chat.completions.create(
                model=self.config.model, messages=cast(Any, list(messages)), **extra
            )
        except openai.OpenAIError as exc:
            raise self._as_llm_error(exc) from None  # the cause may quote the key (OpenAI's 401 body does)
        if not getattr(completion, "choices", None):
            said = self._server_detail({"error": getattr(completion, "error", None)}).removeprefix(": ")
            broke = f"the model endpoint {self.config.endpoint} broke protocol: a reply with no choices"
            raise LLMError(self._dead(said) or broke + (f" ({said})" if said else ""))
        usage = self._count(completion, messages)
        choice = completion.choices[0]
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments or "")
            for c in choice.message.tool_calls or ()
            if getattr(c, "function", None) is not None
        )
        log.debug(
            "model call %d: %d+%d tokens, %d tool calls",
            self.calls,
            usage.prompt_tokens,
            usage.completion_tokens,
            len(calls),
        )
        return ChatReply(choice.message.content, calls, usage, choice.finish_reason)

    def _count(self, completion: Any, messages: Sequence[Mapping[str, Any]]) -> Usage:
        raw = completion.usage
        if raw is not None:
            usage = Usage(raw.prompt_tokens or 0, raw.completion_tokens or 0)
        else:  # some servers omit usage; a rough estimate (4 chars a token) keeps the token budget honest
            text = completion.choices[0].message.content or ""
            usage = Usage(len(json.dumps(list(messages), default=str)) // 4, len(text) // 4)
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        return usage

    def _as_llm_error(self, exc: openai.OpenAIError) -> LLMError:
        cfg, where = self.config, self.config.endpoint
        tries = f"after {1 + cfg.max_retries} attempts"
        if isinstance(exc, openai.AuthenticationError):
            return LLMError(
                f"the model endpoint {where} refused the API key (HTTP 401): "
                "check OPENAI_API_KEY or llm.api_key"
            )
        if isinstance(exc, openai.PermissionDeniedError):
            return LLMError(f"the model endpoint {where} denied access to model {cfg.model!r} (HTTP 403)")
        if isinstance(exc, openai.NotFoundError):
            return LLMError(
                f"the model endpoint {where} has no model {cfg.model!r} or no chat API (HTTP 404): "
                "check MEDIC_LLM_MODEL and OPENAI_BASE_URL"
            )
        if isinstance(exc, openai.RateLimitError):
            return LLMError(
                f"the model endpoint {where} kept rate-limiting (HTTP 429) {tries}; try again later"
            )
        if isinstance(exc, openai.APIStatusError):
            detail = self._server_detail(exc.body)
            if exc.status_code >= 500:
                return LLMError(self._dead(detail.removeprefix(": ")) or
                    f"the model endpoint {where} failed with HTTP {exc.status_code} {tries}{detail}"
                )
            said = f"the model endpoint {where} rejected the request (HTTP {exc.status_code}){detail}"
            return RequestRejected(said, detail.removeprefix(": ")) if exc.status_code in (400, 422) else LLMError(said)
        if isinstance(exc, openai.APITimeoutError):
            return LLMError(f"the model endpoint {where} did not answer within {cfg.timeout:g}s, {tries}")
        if isinstance(exc, openai.APIConnectionError):
            return LLMError(self._dead() or f"cannot reach the model endpoint {where} {tries}: is the server up?")
        if isinstance(exc, openai.APIResponseValidationError):
            return LLMError(f"the model endpoint {where} broke protocol: its reply is not a chat completion")
        return LLMError(
            f"the model endpoint {where} call failed: {self._redact(type(exc).__name__ + ': ' + str(exc))}"
        )

    def _dead(self, said: str = "") -> str:
        """The endpoint's own /health when a reply is unusable: a dead engine is named, not a protocol break."""
        dead = endpoint.dead_endpoint(self.config.endpoint, self.config.base_url, self.config.server_log, said)
        return self._redact(dead) if dead else ""

    def _server_detail(self, body: object) -> str:
        """The server's own short reason (a 400 says which parameter), never the key."""
        message = body.get("message") if isinstance(body, dict) else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = body["error"].get("message")
        return f": {self._redact(str(message))[:200]}" if message else ""

    def _redact(self, text: str) -> str:
        key = self.config.api_key.get_secret_value() if self.config.api_key else ""
        return text.replace(key, "[api key]") if key else text
