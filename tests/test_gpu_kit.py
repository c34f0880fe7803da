"""bench/gpu's kit, the parts that run here: which Python 3.12 prepare.sh takes, and the job the device runs."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "bench" / "gpu"


def find_py312(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    shims = tmp_path / "shims"
    shims.mkdir(exist_ok=True)
    shim = shims / "python3.12"  # what pyenv puts on PATH for a version it has not selected
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    base = {"PATH": f"{shims}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    return subprocess.run(["bash", str(KIT / "find_py312.sh")], env={**base, **env}, capture_output=True,
                          text=True, timeout=60)


def test_a_python312_shim_that_fails_is_passed_over(tmp_path: Path) -> None:
    got = find_py312(tmp_path)
    if got.returncode == 0:  # a real one elsewhere on this machine: it runs, and it is not the shim
        found = got.stdout.strip()
        assert "shims" not in found
        ran = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        assert ran.stdout.strip() == "(3, 12)"
    else:
        assert got.returncode == 1 and got.stdout == ""
        assert got.stderr.count("\n") == 1 and "name one: PY312=/path/to/python3.12" in got.stderr


def test_a_python312_kept_by_a_version_manager_is_found(tmp_path: Path) -> None:
    real = tmp_path / "home" / ".pyenv" / "versions" / "3.12.9" / "bin" / "python3.12"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\n# answers as a Python 3.12 does to the probe\nexit 0\n")
    real.chmod(0o755)
    got = find_py312(tmp_path)
    assert got.returncode == 0
    assert got.stdout.strip() in (str(real), "/usr/bin/python3.12", "/usr/local/bin/python3.12")


def test_a_named_python_that_does_not_run_is_refused_in_one_line(tmp_path: Path) -> None:
    got = find_py312(tmp_path, PY312=str(tmp_path / "shims" / "python3.12"))
    assert got.returncode == 1 and got.stdout == ""
    assert got.stderr.strip() == f"find_py312: PY312={tmp_path}/shims/python3.12 is not a working Python 3.12"


def job_words(tmp_path: Path, loop: str, flags: str = "") -> list[str]:
    """The medic command device_run.sh writes for ``loop`` (``flags`` given to job_command after the session), as
    the shell will split it."""
    (tmp_path / "bundle" / "job").mkdir(parents=True)
    (tmp_path / "bundle" / "job" / "loop").write_text(loop + "\n")
    script = (KIT / "device_run.sh").read_text()
    functions = "\n".join(line for line in script.splitlines() if line.startswith("loop()"))
    start = script.index("job_command() {")
    functions += "\n" + script[start:script.index("\n}\n", start) + 3]
    out = subprocess.run(["bash", "-c", f'G={tmp_path}\n{functions}\njob_command /m/medic s1 {flags}'],
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    return shlex.split(out.stdout)


def test_the_device_runs_the_readme_server_example_as_typed(tmp_path: Path) -> None:
    words = job_words(tmp_path, "server")
    assert words[:3] == ["/m/medic", "run", "--session"] and "--validate" not in words
    assert words[words.index("--workdir") + 1] == "."
    server = shlex.split(words[words.index("--server") + 1])
    assert server[:5] == ["python", "-m", "vllm.entrypoints.cli.main", "serve", "model"]  # the env's python, bare
    assert '"method":"extract_hidden_states"' in server[server.index("--speculative_config") + 1]
    client = words[words.index("--") + 1:]
    assert client[:2] == ["speculators", "generate-offline-data"]  # the env's console script, venv not activated
    assert client[client.index("--endpoint") + 1] == "http://127.0.0.1:{port}/v1"


def test_the_device_runs_the_in_process_driver_without_a_loop_file(tmp_path: Path) -> None:
    words = job_words(tmp_path, "inprocess")
    assert words[words.index("--") + 1:] == ["python", "extract.py", "--model", "model", "--out", "hidden_states.pt"]


def test_the_clean_launch_is_the_same_job_with_medic_doing_nothing_else(tmp_path: Path) -> None:
    """device_run.sh clean: the unit of the overhead ratio is the job medic fixed, launched once, no scan or canary:
    the flags go to medic, before the job's own words."""
    plain, clean = job_words(tmp_path, "inprocess"), job_words(tmp_path / "c", "inprocess", "--no-scan --no-canary")
    cut = clean.index("--")
    assert {"--no-scan", "--no-canary"} <= set(clean[:cut]) and clean[cut:] == plain[plain.index("--"):]
