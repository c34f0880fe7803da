"""A real chat-completions server on 127.0.0.1 that replays a script, for tests through the openai client.

Each request takes the next script entry: a reply (text and/or tool calls, with usage), an HTTP status
(429 + Retry-After, 500, 401...), or a hang longer than the client's timeout. Every request is recorded
(path, headers, JSON body), so a test can count attempts and read exactly what the model was sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class ScriptedCall:
    name: str
    arguments: str  # raw text: a test may send malformed JSON on purpose


@dataclass(frozen=True)
class Reply:
    content: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    prompt_tokens: int = 100
    completion_tokens: int = 20


@dataclass(frozen=True)
class Status:
    code: int
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str = "scripted error"


@dataclass(frozen=True)
class Hang:
    seconds: float = 5.0


@dataclass(frozen=True)
class EngineDead:
    """What vLLM 0.16's server does once its engine died: the route returns its error object as the body of an
    HTTP 200 (no ``choices``), and ``/health`` answers 503 from then on."""

    message: str = "EngineCore encountered an issue. See stack trace (above) for the root cause."
    health: int = 503  # 200: the same reply from a server whose /health says all is well


Entry = Reply | Status | Hang | EngineDead


def say(text: str) -> Reply:
    return Reply(content=text)


def call(name: str, arguments: str | Mapping[str, Any] = "{}") -> Reply:
    """A reply with one tool call; a dict is sent as JSON, a string exactly as given."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(tool_calls=(ScriptedCall(name, raw),))


def calls(*pairs: tuple[str, str | Mapping[str, Any]]) -> Reply:
    return Reply(
        tool_calls=tuple(ScriptedCall(n, a if isinstance(a, str) else json.dumps(a)) for n, a in pairs)
    )


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


class ScriptedOpenAIServer:
    def __init__(self) -> None:
        self.script: list[Entry] = []
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()  # ends hangs at teardown
        self.health = 200  # what GET /health answers (an EngineDead reply makes it 503)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def queue(self, *entries: Entry) -> None:
        with self._lock:
            self.script.extend(entries)

    def start(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, received: Received) -> Entry:
        with self._lock:
            self.requests.append(received)
            return self.script.pop(0) if self.script else Status(400, message="the test script is exhausted")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/health":
                    self._send(404, {"error": {"message": f"no route {self.path}"}}, {})
                    return
                self._send(server.health, {}, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                entry = server._next(Received(self.path, headers, body))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    entry = Status(404, message=f"no route {self.path}")
                if isinstance(entry, Hang):
                    server._stop.wait(entry.seconds)
                    return  # the client gave up long ago; close without an answer
                if isinstance(entry, EngineDead):
                    server.health = entry.health
                    error = {"message": entry.message, "type": "InternalServerError", "param": None, "code": 500}
                    self._send(200, {"error": error}, {})
                    return
                if isinstance(entry, Status):
                    error = {"message": entry.message, "type": "scripted", "code": str(entry.code)}
                    self._send(entry.code, {"error": error}, entry.headers)
                    return
                self._send(200, completion(entry, body.get("model", "scripted")), {})

            def _send(self, code: int, payload: dict[str, Any], headers: Mapping[str, str]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


_ids = iter(range(1, 1_000_000))


def completion(reply: Reply, model: str) -> dict[str, Any]:
    """A chat.completion object as the OpenAI API returns it."""
    n = next(_ids)
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


@pytest.fixture(name="openai_server")
def openai_server_fixture() -> Iterator[ScriptedOpenAIServer]:
    """A started server, stopped (hangs released) after the test."""
    server = ScriptedOpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()


# Import either name into a test module to get the ``openai_server`` fixture; importing the second one
# keeps a test's ``openai_server`` parameter from shadowing the import (ruff F811).
openai_server = openai_server_fixture
