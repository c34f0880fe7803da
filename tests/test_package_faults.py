"""Package faults of the target env: pip left a distribution outside the range speculators declares, and
``import speculators`` itself fails. medic imports the module as its wheel shipped it (its own patches set
aside) before it blames a patch; the fault is the environment's, its remedy a host step installing the declared
range (stop-and-ask, exit 8, then resume), never a code patch, and no patch of medic's is reverted for it.

The env is real: a private copy of the lab whose pydantic pip replaced with a real release below the range
speculators declares for it (read from speculators' own metadata). The remedy is proven before it is proposed:
pip's plan for the declared range, laid over the env in a scratch folder, imports.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet

from agent.checks import run_check
from agent.cli.run import lab_target
from agent.config import Budgets, SessionConfig
from agent.outcomes import OUTCOMES
from agent.repair.types import Check, RepairContext
from agent.session import run_session
from lab.build import LabBuilder, LabPaths
from tools.envprobe import pristine_import
from tools.host import LocalHost
from tools.patches import apply_patch, make_patch
from tools.reverts import revert_patch

BROKEN = "pydantic"  # the dependency that is put outside speculators' declared range
DECLARED = ("import json, sys; from importlib import metadata; from packaging.requirements import Requirement; "
            "print(json.dumps([str(r.specifier) for r in map(Requirement, metadata.requires('speculators')) "
            "if r.name == sys.argv[1] and not r.marker]))")


def declared_range(python: Path, name: str) -> str:
    out = subprocess.run([str(python), "-c", DECLARED, name], capture_output=True, text=True, timeout=120, check=True)
    (spec,) = json.loads(out.stdout)
    return str(spec)


def below(spec: str) -> str:
    """A requirement that only a release outside ``spec`` (a lower bound) can satisfy: ``>=2.0.0`` -> ``<2.0.0``."""
    assert spec.startswith(">="), f"expected a lower bound, speculators declares {spec}"
    return "<" + spec[2:]


@pytest.fixture(scope="module")
def conflicted(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> LabPaths:
    root = tmp_path_factory.mktemp("conflict") / "lab"
    subprocess.run(["cp", "-al", str(lab.root), str(root)], check=True, timeout=300)
    paths = LabPaths(root)
    LabBuilder(paths).reset()
    spec = declared_range(paths.python, BROKEN)
    # pip replaces files (new inodes): the shared lab's pydantic, hard-linked here, is not touched
    pip = subprocess.run([str(paths.python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          f"{BROKEN}{below(spec)}"], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    broken = subprocess.run([str(paths.python), "-c", "import speculators"], capture_output=True, text=True,
                            timeout=300)
    assert broken.returncode != 0 and BROKEN in broken.stderr  # the fault is real
    return paths


@pytest.fixture(scope="module")
def session(conflicted: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """From pristine speculators on the conflicted env; stopped for the host step, which the 'person' runs, then
    resumed to the end."""
    base = tmp_path_factory.mktemp("pkg-session")
    config = SessionConfig(session_id="pkgfault", target=lab_target(conflicted.root), traces_dir=str(base),
                           budgets=Budgets(max_launches=3))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEDIC_HOME", str(base / "home"))
        outcome, values = run_session(config)
        stopped = {"outcome": outcome, "proposal": values.get("proposal"), "patches": values.get("patches") or [],
                   "events": events(base / "pkgfault.jsonl")}
        ran = []
        if outcome == "host_change":
            for step in values["proposal"]["patch"]["host_steps"]:
                ran.append(subprocess.run(step, shell=True, capture_output=True, text=True, timeout=900))
            outcome, values = run_session(config, resume={"action": "approve", "by": "test"})
    return {"stopped": stopped, "ran": ran, "outcome": outcome, "values": values,
            "events": events(base / "pkgfault.jsonl")}


def events(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()[1:]]


def test_the_fault_is_the_environments_and_its_remedy_is_the_declared_range(session: dict[str, Any],
                                                                            conflicted: LabPaths) -> None:
    stopped = session["stopped"]
    assert stopped["outcome"] == "host_change" and OUTCOMES["host_change"].exit_code == 8
    patch = stopped["proposal"]["patch"]
    spec = declared_range(conflicted.python, BROKEN)
    assert patch["files"] == [] and patch["env"] == []  # no code patch, no env edit: a host step
    # the declared range, as pip's plan for it here that was laid over the env and imported: pinned releases
    (step,) = patch["host_steps"]
    words = shlex.split(step)
    assert words[:4] == [str(conflicted.python), "-m", "pip", "install"]
    pins = dict(word.split("==", 1) for word in words[4:])
    assert SpecifierSet(spec).contains(pins[BROKEN]), (spec, pins)
    assert any(e.endswith("with that plan laid over the env: ok") for e in patch["evidence"])
    assert any(e.startswith("speculators ") and f"{BROKEN}{spec}" in e for e in patch["evidence"])  # pip check's
    crash = [e for e in stopped["events"] if e["kind"] == "fault" and e["node"] == "diagnose"]
    assert len(crash) == 1 and BROKEN in crash[0]["data"]["summary"]
    after = stopped["events"][stopped["events"].index(crash[0]):]
    candidates = [e["data"] for e in after if e["kind"] == "candidate"]
    assert [c["origin"] for c in candidates] == ["derived:host:requirement"]


def test_medics_own_patches_are_not_blamed_nor_reverted(session: dict[str, Any]) -> None:
    stopped = session["stopped"]
    kept_files = [p for p in stopped["patches"] if p["patch"]["files"]]
    assert len(kept_files) >= 1  # the scan's patches were on disk when the import failed
    imports = [e["data"] for e in stopped["events"] if e["kind"] == "check" and e["node"] == "watch"
               and e["data"]["check"].startswith("import ")]
    # not ok, and said to be the environment's: no patch is blamed for it
    assert imports and all(not c["ok"] and c["detail"].startswith("environment mismatch: ") for c in imports)
    assert not [e for e in session["events"] if e["kind"] in ("reverted", "patch_refused")]


def test_after_the_host_step_the_session_goes_on_past_the_import(session: dict[str, Any]) -> None:
    assert session["ran"] and all(r.returncode == 0 for r in session["ran"]), session["ran"][0].stderr[-2000:]
    resumed = session["events"][len(session["stopped"]["events"]):]
    checks = [e["data"] for e in resumed if e["kind"] == "check" and e["data"]["check"].startswith("in_range")]
    assert checks and all(c["ok"] for c in checks)
    later = [e["data"]["summary"] for e in resumed if e["kind"] == "fault"]
    assert not any(BROKEN in s for s in later)
    assert session["outcome"] == "verified", session["values"].get("outcome_detail")


def test_a_patch_that_breaks_the_import_is_still_blamed(private_lab: LabPaths) -> None:
    """The pristine import really reads the wheel's bytes: a patch that breaks the module fails its check."""
    site = private_lab.site_packages()
    target = site / "speculators" / "utils" / "pydantic_utils.py"
    medic_dir = private_lab.work / ".medic"
    host = LocalHost()
    bad = make_patch(host, {str(target): target.read_text() + "\nraise ImportError('a bad patch')\n"},
                     rationale="test", origin="test")
    apply_patch(host, bad, roots=(str(site),), ledger_dir=str(medic_dir / "t-1" / "patches"))
    try:
        ctx = RepairContext(host=host, python=str(private_lab.python), roots=(str(site),), site_packages=(str(site),),
                            medic_dir=str(medic_dir))
        ok, detail = run_check(ctx, Check("import", "speculators.utils.pydantic_utils"))
        assert not ok and "a bad patch" in detail
        pristine = pristine_import(host, str(private_lab.python), "speculators", str(medic_dir))
        assert pristine.ok is True and pristine.set_aside == (str(target),)
        assert "a bad patch" in target.read_text()  # set aside for the import only: nothing on disk changed
    finally:
        revert_patch(host, bad.id, ledger_dir=str(medic_dir / "t-1" / "patches"))
