"""A whole session over real SSH (sshd on 127.0.0.1): launch detached, follow, diagnose, patch through SFTP,
relaunch, verify — the same graph as on this machine, through the Host seam."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import SessionConfig, Target
from agent.session import run_session, save_config

LIBRARY = "def compute(x, *, mode):\n    return f'{x}:{mode}'\n"
CALLER = "import fakelib\n\n\ndef run(x):\n    return fakelib.compute(x, mode='a', legacy=True)\n"

pytestmark = pytest.mark.ssh


def test_a_session_over_ssh_reaches_verified_output(sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEDIC_SSH_CONFIG", sshd.config_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    py = tmp_path / "venv" / "bin" / "python"
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    for name, text in (("fakelib", LIBRARY), ("fakecaller", CALLER)):
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    (work / "driver.py").write_text("import pathlib, time\nimport fakecaller\n\nfor i in range(3):\n"
                                    "    print('loading', i, flush=True)\n    time.sleep(0.3)\n"
                                    "pathlib.Path('out.txt').write_text(fakecaller.run(1))\n")
    check = "import pathlib, sys; sys.exit(0 if pathlib.Path('out.txt').read_text() == '1:a' else 1)"
    target = Target(host=sshd.alias, python=str(py), workdir=str(work), command=[str(py), "driver.py"],
                    validate_command=[str(py), "-c", check], library_packages=["fakelib"],
                    fixable_packages=["fakecaller"])
    config = SessionConfig(session_id="ssh-1", target=target, scan=False, traces_dir=str(tmp_path / "traces"))
    save_config(config)

    outcome, state = run_session(config)

    assert outcome == "verified", state.get("outcome_detail")
    assert "legacy" not in (site / "fakecaller" / "__init__.py").read_text()
    header, *events = [json.loads(line) for line in (tmp_path / "traces" / "ssh-1.jsonl").read_text().splitlines()]
    assert header["host"] != "local"  # every command went through paramiko
    assert [e["kind"] for e in events].count("launch") == 2
    assert [e["data"]["origin"] for e in events if e.get("kind") == "applied"] == ["derived:unexpected_kwarg:drop"]
