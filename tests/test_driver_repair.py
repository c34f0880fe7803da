"""Faults in the user's own driver: it lives in the workdir, a patch root, and it calls the fixable package's
API the way the fixable package calls vLLM's — so the same derived repairs apply there, from the INSTALLED
speculators signature. On a private copy of the real lab."""

from __future__ import annotations

from pathlib import Path

from agent.repair.engine import RepairEngine
from agent.repair.scan import scan
from agent.repair.types import RepairContext
from lab.build import LabPaths
from tools.host import LocalHost
from tools.patches import apply_patch


def context(lab: LabPaths) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site, str(lab.work)),
                         site_packages=(site,), workdir=str(lab.work))


def test_a_keyword_the_installed_speculators_no_longer_takes_is_fixed_in_the_driver(private_lab: LabPaths,
                                                                                   tmp_path: Path) -> None:
    driver = private_lab.work / "extract.py"
    text = driver.read_text()
    assert "max_model_len=256)" in text
    driver.write_text(text.replace("max_model_len=256)", "max_model_len=256, tensor_parallel=1)"))
    ctx = context(private_lab)
    found = [f for f in scan(ctx, str(driver)) if f.frames[0].file == str(driver)]
    assert [(f.finding.kind, f.finding.callee, f.finding.name) for f in found if f.finding] == [
        ("unexpected_kwarg", "VllmHiddenStatesGenerator", "tensor_parallel")]
    candidates = RepairEngine().candidates(ctx, found[0])
    assert candidates and [f.path for f in candidates[0].patch.files] == [str(driver)]
    apply_patch(ctx.host, candidates[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    assert "tensor_parallel_size=1" in driver.read_text()  # the installed signature's own name
    assert not [f for f in scan(context(private_lab), str(driver)) if f.frames[0].file == str(driver)]
