"""A distribution's own history as the registry publishes it (PyPI's JSON API): when each release was uploaded,
and what a release declares it needs. Asked from medic's own machine, never from the target host;
``MEDIC_PYPI_URL`` names another server of the same API (a mirror)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from datetime import datetime
from functools import cache

from tools.errors import SourceError

TIMEOUT = 30.0


def api() -> str:
    return os.environ.get("MEDIC_PYPI_URL", "https://pypi.org/pypi").rstrip("/")


def ask(path: str) -> dict[str, object]:
    return fetch(f"{api()}/{path}/json")


@cache  # one session asks the same few pages several times; a release's page does not change
def fetch(url: str) -> dict[str, object]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
            data = json.load(answer)
    except (OSError, urllib.error.URLError, json.JSONDecodeError) as err:
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
    """What release ``version`` of ``name`` declares it needs (its Requires-Dist, as the registry shows it)."""
    info = ask(f"{name}/{version}").get("info")
    requires = info.get("requires_dist") if isinstance(info, dict) else None
    return tuple(str(r) for r in requires or ())
