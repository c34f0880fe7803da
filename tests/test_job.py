"""The job's command as the target runs it (agent/job.py): a bare `python` is --python, the driver is read
from --workdir, and relative paths on this machine are taken from medic's cwd — through the real CLI on the
fake target's own venv, whose packages the `python` first on PATH does not have."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from agent.config import Target
from agent.job import driver_path, script_argument, with_interpreter
from agent.repair.scan import scan_files
from agent.repair.types import RepairContext
from tests.fixtures_fake import CHECK, FIXED, Fake, MakeFake, medic_cli
from tools.host import LocalHost

PY, WORK = "/venv/bin/python", "/data/job"


@pytest.mark.parametrize("command,expected", [
    (["python", "x.py"], [PY, "x.py"]),
    (["python3", "-u", "x.py"], [PY, "-u", "x.py"]),
    (["python3.11", "x.py"], [PY, "x.py"]),
    (["/usr/bin/python", "x.py"], ["/usr/bin/python", "x.py"]),  # a path is what the user chose
    (["torchrun", "x.py"], ["torchrun", "x.py"]),
    (["pythonic", "x.py"], ["pythonic", "x.py"]),
])
def test_a_bare_python_is_the_target_python(command: list[str], expected: list[str]) -> None:
    replaced, given = with_interpreter(command, PY)
    assert replaced == expected and given == (command[0] if expected[0] == PY else None)


@pytest.mark.parametrize("command,driver", [
    ([PY, "extract.py"], f"{WORK}/extract.py"),
    (["python", "-u", "extract.py", "--out", "out.py"], f"{WORK}/extract.py"),
    (["python3.11", "-W", "ignore", "-X", "dev", "../scripts/extract.py"], "/data/scripts/extract.py"),
    (["python", "-uWignore", "-B", "/abs/extract.py"], "/abs/extract.py"),
    (["python", "--check-hash-based-pycs", "never", "-O", "--", "sub/extract.py"], f"{WORK}/sub/extract.py"),
    (["torchrun", "--nproc-per-node", "2", "extract.py"], f"{WORK}/extract.py"),
    (["./extract.py", "--x"], f"{WORK}/extract.py"),
    (["python", "-c", "import extract", "x.py"], None),
    (["python", "-m", "extract"], None),  # a module needs the target env to say where it is
    (["bash", "run.sh"], None),
])
def test_the_driver_is_read_from_the_workdir(command: list[str], driver: str | None) -> None:
    assert driver_path(Target(python=PY, workdir=WORK, command=command)) == driver


def test_script_argument_tells_a_module_from_a_script() -> None:
    assert script_argument(["python", "-Bm", "pkg.mod", "x.py"], PY) == ("module", "pkg.mod")
    assert script_argument(["python", "-mpkg"], PY) == ("module", "pkg")
    assert script_argument(["python", "-"], PY) is None


def test_a_module_driver_is_found_in_the_target_env(fake: Fake) -> None:
    """`-m`: the workdir first (as `python -m` puts its cwd first), then the venv, whose packages medic's own
    python does not see; a package runs its __main__.py."""
    (fake.work / "jobpkg").mkdir()
    (fake.work / "jobpkg" / "__init__.py").write_text("")
    (fake.work / "jobpkg" / "__main__.py").write_text("import fakecaller\n")
    (fake.site / "venvdriver.py").write_text("import fakecaller\n")
    host = LocalHost()

    def of(*command: str) -> str | None:
        return driver_path(Target(python=str(fake.python), workdir=str(fake.work), command=list(command)), host)

    assert of("python", "-m", "jobpkg") == str(fake.work / "jobpkg" / "__main__.py")
    assert of("python", "-u", "-m", "venvdriver", "--out", "x") == str(fake.site / "venvdriver.py")
    assert of("python", "-m", "no_such_module") is None


def test_the_scan_reads_the_driver_of_the_workdir(fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    """The command names driver.py relative to the job's folder; medic runs elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    target = fake.config.target
    assert target.command[1] == "driver.py"
    driver = driver_path(target)
    assert driver == str(fake.work / "driver.py")
    ctx = RepairContext(host=LocalHost(), python=target.python, roots=(str(fake.site),),
                        fixable_packages=("fakecaller",), library_packages=("fakelib",), workdir=target.workdir)
    assert scan_files(ctx, driver) == [driver, str(fake.caller)]  # the driver itself is the user's code too


def fixed_fake(make_fake: MakeFake) -> Fake:
    """The fake target without its drift (the CLI's sessions patch speculators, not fakecaller)."""
    fake = make_fake(save=False)
    fake.caller.write_text(FIXED)
    return fake


def path_python(tmp_path: Path) -> dict[str, str]:
    """A PATH whose `python` is another env (medic's own base python): it has no fakelib, as on a GPU box
    where `python` is the system's and the job's env is a venv."""
    bin_dir = tmp_path / "path-bin"
    bin_dir.mkdir(exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    for name in ("python", "python3"):
        if not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(base)
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def test_bare_python_in_the_job_and_the_validator_runs_the_target_env(make_fake: MakeFake, tmp_path: Path
                                                                       ) -> None:
    fake = fixed_fake(make_fake)
    done = medic_cli("run", "--session", "bare", "--mode", "unattended", "--no-scan", "--no-canary",
                     "--traces", str(fake.root / "traces"), "--python", str(fake.python), "--workdir",
                     str(fake.work), "--validate", f"python -c {json.dumps(CHECK)}", "--", "python", "driver.py",
                     env=path_python(tmp_path))
    trace = [json.loads(line) for line in (fake.root / "traces" / "bare.jsonl").read_text().splitlines()[1:]]
    launches = [e["data"] for e in trace if e["kind"] == "launch"]
    validated = [e["data"] for e in trace if e["kind"] == "validate"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(launch["command"][0] == str(fake.python) for launch in launches)
    assert launches[0]["interpreter"] == {"given": "python", "ran": str(fake.python)}
    assert validated[-1]["verified"] and validated[-1]["interpreter"]["given"] == "python"


def test_relative_python_workdir_and_patch_root_are_taken_from_medics_cwd(make_fake: MakeFake, tmp_path: Path
                                                                          ) -> None:
    fake = fixed_fake(make_fake)
    (fake.root / "shared").mkdir()
    done = medic_cli("run", "--session", "rel", "--mode", "unattended", "--no-scan", "--no-canary",
                     "--traces", "../traces", "--python", "../venv/bin/python", "--workdir", ".",
                     "--patch-root", "../shared", "--validate", f"python -c {json.dumps(CHECK)}", "--",
                     "python", "driver.py", env=path_python(tmp_path), cwd=fake.work)
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((Path(os.environ["MEDIC_HOME"]) / "sessions" / "rel" / "config.json").read_text())
    assert (saved["target"]["python"], saved["target"]["workdir"]) == (str(fake.python), str(fake.work))
    assert saved["target"]["extra_patch_roots"] == [str(fake.root / "shared")]
    # a remote host has no cwd of medic's: there a relative path is still bad input, in one line
    remote = medic_cli("run", "--session", "remote-rel", "--host", "gpu-box", "--python", "/venv/bin/python",
                       "--workdir", "job", "--", "python", "x.py", env={"HOME": str(tmp_path)})
    assert remote.returncode == 2 and remote.stderr.strip().splitlines()[-1].startswith("medic: ")
    assert "absolute" in remote.stderr and "Traceback" not in remote.stderr
