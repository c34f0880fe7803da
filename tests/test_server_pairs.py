"""Server-lab pairs (lab/server_pairs.py, lab/server_pair_lab.py): naming, the refusal of a release with no server
client, the builder a lab folder gets, the client a pair runs, and the requirement texts pip is given. No network
and no lab venv: seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.build import LABS_ROOT, LabPaths
from lab.lab_requirements import client_requirements, server_constraints
from lab.server_lab import ServerLabBuilder, ServerLabPaths, server_root
from lab.server_pair_lab import PairLabBuilder, server_lab_builder
from lab.server_pairs import ServerPair, client_script, recorded_pair
from tools.errors import LabError, UsageError
from tools.hs_layouts import client_of

MEDIC = Path(sys.executable).with_name("medic")


def test_a_release_with_no_server_client_is_refused_in_one_line_leaving_nothing(tmp_path: Path) -> None:
    labs = tmp_path / "labs"
    proc = subprocess.run([str(MEDIC), "lab", "build", "--flavour", "server", "--speculators", "0.4.0"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "MEDIC_LABS_DIR": str(labs), "COLUMNS": "300"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("medic: speculators 0.4.0 has no hidden-state server client")
    assert "0.5.0 or later" in lines[0]
    assert not labs.exists()


def test_pair_names_and_paths() -> None:
    assert ServerPair().is_default and server_root() == ServerPair().default_root()
    assert server_root() == LABS_ROOT / "server-vllm-0.32.0_spec-0.9.0"  # the first server lab's path, unchanged
    assert ServerPair.parse("0.8.1").default_root() == LABS_ROOT / "server-vllm-0.32.0_spec-0.8.1"
    assert ServerPair.parse("0.5.0:0.19.1").name == "server-vllm-0.19.1_spec-0.5.0"
    with pytest.raises(UsageError):
        ServerPair.parse("latest")


@pytest.mark.parametrize(("release", "tag"), [("0.5.0", "v0.5.0"), ("0.6.0", "v0.6.0"), ("0.6.0.2", "v0.6.0"),
                                              ("0.7.0.2", "v0.7.0"), ("0.8.1", None), ("0.9.0", None)])
def test_the_script_of_a_release_line(release: str, tag: str | None) -> None:
    assert ServerPair(release).script_tag() == tag
    if tag:  # what tools/hs_layouts.py knows as that line's client
        found = client_of(["python", "data_generation_offline.py"])
        assert found is not None and "import" in client_script(tag)


def test_a_pair_lab_runs_its_script_client_and_its_own_server_options(tmp_path: Path) -> None:
    (tmp_path / "lab.json").write_text(json.dumps({"flavour": "server", "vllm": "0.19.1", "speculators": "0.5.0"}))
    paths = ServerLabPaths(tmp_path)
    assert recorded_pair(tmp_path) == ServerPair("0.5.0", "0.19.1") == paths.pair
    assert paths.command()[1] == "generate-offline-data"  # no script written yet: the CLI
    paths.client_script.parent.mkdir()
    paths.client_script.write_text(client_script("v0.5.0"))
    assert paths.command()[:2] == [str(paths.python), str(paths.client_script)]
    assert "--renderer-num-workers" not in paths.server_command()  # an option of the 0.32.0 server only
    assert "--renderer-num-workers" in ServerLabPaths(tmp_path / "none").server_command()


def test_the_client_keeps_its_torch_range_and_the_server_gives_constraints() -> None:
    client = client_requirements("Requires-Dist: torch<=2.11.0,>=2.9.0\nRequires-Dist: torchvision\n"
                                 "Requires-Dist: hs-connectors==0.8.0\nRequires-Dist: ruff; extra == \"dev\"\n"
                                 "Requires-Dist: datasets<=4.8.4,>=4.0.0\n")
    assert client.splitlines() == ["torch<=2.11.0,>=2.9.0", "datasets<=4.8.4,>=4.0.0"]
    server = server_constraints("Requires-Dist: torch==2.13.0+cpu; platform_machine == \"x86_64\"\n"
                                "Requires-Dist: uvicorn[standard]>=0.30\nRequires-Dist: torchaudio\n"
                                "Requires-Dist: transformers<5.20.0,>=5.16.1\n", "2.13.0")
    assert server.splitlines() == ["uvicorn>=0.30", "transformers<5.20.0,>=5.16.1", "torch==2.13.0"]


def test_the_base_a_pair_copies_follows_the_torch_its_server_pins(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import lab.server_pairs as pairs

    monkeypatch.setattr(pairs, "LABS_ROOT", tmp_path)
    first = tmp_path / "server-vllm-0.32.0_spec-0.9.0"
    assert pairs.base_lab(ServerPair("0.8.1"), "2.13.0") == (first, "server", True)
    assert pairs.base_lab(ServerPair("0.7.0.2", "0.31.0"), "2.13.0") == (first, "server", False)  # 0.31.0 goes in
    assert pairs.base_lab(ServerPair("0.5.0", "0.26.0"), "2.11.0") == (None, "fresh", False)
    assert pairs.base_lab(ServerPair("0.5.0", "0.19.1"), "2.10.0")[1:] == ("inprocess", True)
    built = tmp_path / "server-vllm-0.26.0_spec-0.5.0"
    (built / ".stamps").mkdir(parents=True)
    (built / ".stamps" / "probe.json").write_text("{}")  # a built pair of the same server: its venv is shared
    assert pairs.base_lab(ServerPair("0.6.0.2", "0.26.0"), "2.11.0") == (built, "server", True)
    assert pairs.base_lab(ServerPair("0.5.0", "0.26.0"), "2.11.0") == (None, "fresh", False)  # never itself


def test_the_builder_of_a_lab_folder_follows_its_pair(tmp_path: Path) -> None:
    """A pair's folder gets the pair's steps (its base lab, its client), the first server lab's folder the first
    lab's; the first lab's builder will not build a pair's folder with its own steps."""
    pair_root, first_root = tmp_path / "pair", tmp_path / "first"
    pair_root.mkdir()
    (pair_root / "lab.json").write_text(json.dumps({"flavour": "server", "vllm": "0.19.1", "speculators": "0.5.0"}))
    recorded = server_lab_builder(LabPaths(pair_root))
    asked = server_lab_builder(LabPaths(first_root), pair=ServerPair("0.8.1"))
    assert isinstance(recorded, PairLabBuilder) and recorded.pair == ServerPair("0.5.0", "0.19.1")
    assert isinstance(asked, PairLabBuilder) and asked.pair == ServerPair("0.8.1")
    assert "base" in [step.name for step in recorded.steps()]
    first = server_lab_builder(LabPaths(first_root))
    assert type(first) is ServerLabBuilder and "torch" in [step.name for step in first.steps()]
    with pytest.raises(LabError, match="server_lab_builder"):
        ServerLabBuilder(LabPaths(pair_root)).steps()


def _wheel(folder: Path, name: str, version: str) -> None:
    """A minimal pure-Python wheel pip installs (no index: the tests' own releases)."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()}"
              f",{len(text.encode())}" for path, text in files.items()]
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")


def test_a_forced_client_gets_what_the_servers_pins_allow_and_says_what_was_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-deps as users do it: each client requirement pip refuses under the server's pins is left out, with
    pip's own reason; the others go in; the server's pin wins."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, version in (("alpha", "1.0"), ("alpha", "2.0"), ("beta", "1.0")):
        _wheel(wheels, name, version)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    pair = ServerPair("0.5.0", "0.32.0", no_deps=True)
    builder = PairLabBuilder(LabPaths(tmp_path / "lab"), pair=pair)
    # pip is the base interpreter's, through --system-site-packages (as tests/test_import_history.py's env)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(builder.paths.root / "venv")], check=True, timeout=120)
    runtime, constraints = tmp_path / "client.txt", tmp_path / "server.txt"
    runtime.write_text("alpha<2\nbeta\n")
    constraints.write_text("alpha==2.0\n")
    assert builder._refused("-r", str(runtime), "-c", str(constraints), what="both").startswith("ERROR: Cannot")
    left_out = builder._force_client((), runtime, constraints)
    assert len(left_out) == 1 and left_out[0].startswith("alpha<2  # pip: ") and "alpha" in left_out[0][9:]
    listed = subprocess.run([str(builder.paths.python), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout
    assert "beta==1.0" in listed and "alpha==" not in listed  # beta in; alpha<2 never forced against the pin


def test_a_forced_pair_has_its_own_lab_and_is_never_a_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lab.server_pairs as pairs

    monkeypatch.setattr(pairs, "LABS_ROOT", tmp_path)
    forced = ServerPair("0.5.0", "0.26.0", no_deps=True)
    assert forced.name == "server-vllm-0.26.0_spec-0.5.0_no-deps" and "--no-deps" in str(forced)
    root = tmp_path / forced.name
    (root / ".stamps").mkdir(parents=True)
    (root / ".stamps" / "probe.json").write_text("{}")
    (root / "lab.json").write_text(json.dumps({"flavour": "server", "vllm": "0.26.0", "speculators": "0.5.0",
                                               "no_deps": True}))
    assert recorded_pair(root) == forced
    assert pairs.base_lab(ServerPair("0.6.0.2", "0.26.0"), "2.11.0") == (None, "fresh", False)


def test_no_deps_without_the_server_flavour_is_refused_in_one_line(tmp_path: Path) -> None:
    labs = tmp_path / "labs"
    proc = subprocess.run([str(MEDIC), "lab", "build", "--no-deps", "--speculators", "0.4.0"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "MEDIC_LABS_DIR": str(labs), "COLUMNS": "300"})
    assert proc.returncode == 2 and "--no-deps" in proc.stderr and "--flavour server" in proc.stderr
    assert not labs.exists()
