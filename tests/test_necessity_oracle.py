"""The space bench's necessity oracle (bench/space_necessity.py) on a real session of the fake target: each kept
change left out is judged from no output, and the verified output is what the lab's checker finds after.

speculators 0.5–0.7's script skips the samples whose files are there already; left to rerun over the verified
session's output, it would do nothing, verify, and call every change of its own needless."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent.session import read_checkpoint, run_session
from bench.space_necessity import NEEDLESS_RUNS, leave_each_out
from tests.fixtures_fake import CHECK, MakeFake

SKIPS_DONE = "import pathlib, sys\nif pathlib.Path('out.txt').exists():\n    sys.exit(0)  # done already: resume\n"


def test_a_change_is_judged_from_no_output_and_the_verified_output_is_put_back(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended")
    outcome, _ = run_session(fake.config)
    assert outcome == "verified"
    kept = list(read_checkpoint(fake.config.session_id)[0].get("patches") or [])
    assert [k["patch"]["origin"] for k in kept] == ["derived:unexpected_kwarg:drop"]
    driver = fake.work / "driver.py"
    driver.write_text(SKIPS_DONE + driver.read_text())
    output = fake.work / "out.txt"
    output.write_text("1:a")  # the verified session's

    def checked() -> bool:
        return subprocess.run([str(fake.python), "-c", CHECK], cwd=fake.work).returncode == 0

    verdict = leave_each_out(fake.config, kept, checked, output)
    assert verdict["needed"] == [kept[0]["patch"]["id"]] and verdict["needless"] == [], verdict
    assert output.read_text() == "1:a" and not output.with_name("out.txt.verified").exists()
    assert "legacy=True" not in fake.caller.read_text()  # the change left out is back on


def test_a_change_the_output_verifies_without_is_needless_only_after_every_run(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended")
    assert run_session(fake.config)[0] == "verified"
    kept = list(read_checkpoint(fake.config.session_id)[0].get("patches") or [])
    takes_it = "def compute(x, *, mode, legacy=False):\n    return f'{x}:{mode}'\n"  # the drift is gone
    (fake.site / "fakelib" / "__init__.py").write_text(takes_it)
    runs: list[Path] = []  # the checker is asked once a run

    def checked() -> bool:
        runs.append(fake.work / "out.txt")
        return subprocess.run([str(fake.python), "-c", CHECK], cwd=fake.work).returncode == 0

    verdict = leave_each_out(fake.config, kept, checked, fake.work / "out.txt")
    assert verdict["needless"] == [kept[0]["patch"]["id"]], verdict
    assert len(runs) == NEEDLESS_RUNS
