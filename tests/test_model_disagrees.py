"""A stop that says the model folder disagrees with itself (agent/repair/limits_weights.py): its checkpoint holds a
weight that vLLM's model class builds only under a config value its config.json does not give — or does not fit the
model class: its config.json lacks a field the class reads.

The server lab's vLLM (0.32.0) builds DeepSeek's ``gate.e_score_correction_bias`` only under ``topk_method ==
"noaux_tc"``; transformers' DeepSeek-V3 saves that bias whatever its config says, so a folder whose config.json
leaves ``topk_method`` out dies in ``load_weights`` (the space bench's first tiny DeepSeek-V3, before its maker
wrote what DeepSeek-V3's own checkpoints say).
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.repair.limits_weights import unbuilt_weight, unset_field
from agent.repair.types import Fault, FrameRef, RepairContext
from lab.build import LabPaths
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import server_repair_context
from tools.host import LocalHost

KEY = "layers.1.mlp.gate.e_score_correction_bias"


def load_fault(lab: ServerLabPaths, key: str = KEY) -> Fault:
    site = lab.site_packages() / "vllm" / "model_executor" / "models"
    return Fault("crash", "KeyError", f"'{key}'", (FrameRef(str(site / "utils.py"), 476, "load_weights"),
                                                   FrameRef(str(site / "deepseek_v2.py"), 1820, "load_weights")))


def folder(tmp_path: Path, **config: object) -> str:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deepseek_v3", **config}))
    return str(tmp_path)


def test_a_weight_the_config_tells_vllm_not_to_build_is_the_model_folder_s_disagreement(
        server_lab: ServerLabPaths, tmp_path: Path) -> None:
    ctx = server_repair_context(server_lab)
    said = unbuilt_weight(ctx, load_fault(server_lab), folder(tmp_path, n_routed_experts=4))
    assert said is not None and said.startswith("the model folder disagrees with itself")
    assert "getattr(config, 'topk_method', None) == 'noaux_tc'" in said and "topk_method=None" in said
    assert "vllm/model_executor/models/deepseek_v2.py:" in said and "medic changes no model file" in said


def test_nothing_is_claimed_where_the_config_does_say_it_or_no_guard_builds_the_weight(
        server_lab: ServerLabPaths, tmp_path: Path) -> None:
    ctx = server_repair_context(server_lab)
    assert unbuilt_weight(ctx, load_fault(server_lab), folder(tmp_path, topk_method="noaux_tc")) is None
    assert unbuilt_weight(ctx, load_fault(server_lab, "layers.1.mlp.gate.weight"), folder(tmp_path)) is None
    assert unbuilt_weight(ctx, load_fault(server_lab), None) is None  # no model folder named: nothing to read


# -- the in-process lab's vLLM (0.16.0) and a HunYuan folder transformers 4.57 saved ---------------------------------
def hunyuan(lab: LabPaths) -> tuple[RepairContext, Path]:
    site = lab.site_packages()
    ctx = RepairContext(host=LocalHost(), python=str(lab.python), roots=(str(site),), site_packages=(str(site),),
                        versions={"vllm": "0.16.0"})
    return ctx, site / "vllm" / "model_executor" / "models" / "hunyuan_v1.py"


def test_a_norm_built_under_an_attribute_the_config_sets_is_the_folder_s_disagreement(
        lab: LabPaths, tmp_path: Path) -> None:
    """vLLM builds ``self_attn.key_layernorm`` only ``if self.use_qk_norm``, which it set from ``getattr(config,
    "use_qk_norm", False)``; transformers' HunYuan saves the norm and no such field."""
    ctx, model = hunyuan(lab)
    fault = Fault("crash", "KeyError", "'layers.0.self_attn.key_layernorm.weight'",
                  (FrameRef(str(model), 1, "load_weights"),))
    said = unbuilt_weight(ctx, fault, folder(tmp_path))
    assert said is not None and "getattr(config, 'use_qk_norm', False)" in said and "use_qk_norm=None" in said
    assert "vllm 0.16.0 builds only when" in said and "vllm/model_executor/models/hunyuan_v1.py:" in said
    assert unbuilt_weight(ctx, fault, folder(tmp_path, use_qk_norm=True)) is None  # the config says it: not this


def test_a_config_field_the_model_class_reads_and_the_folder_lacks_is_named(lab: LabPaths, tmp_path: Path) -> None:
    ctx, model = hunyuan(lab)
    reads = next(i for i, text in enumerate(model.read_text().splitlines(), 1)
                 if "if config.moe_intermediate_size is not None" in text)
    fault = Fault("crash", "AttributeError", "'HunYuanMoEV1Config' object has no attribute 'moe_intermediate_size'",
                  (FrameRef(str(model), reads, "__init__"),))
    said = unset_field(ctx, fault, folder(tmp_path))
    assert said is not None and said.startswith(
        "the model folder does not fit the model class: vllm 0.16.0 reads config.moe_intermediate_size (vllm/"
        f"model_executor/models/hunyuan_v1.py:{reads}: `if config.moe_intermediate_size is not None:`)")
    assert "HunYuanMoEV1Config has no default for" in said and "medic changes no model file" in said
    assert unset_field(ctx, fault, folder(tmp_path, moe_intermediate_size=128)) is None  # the folder gives it
    elsewhere = Fault("crash", "AttributeError", fault.message, (FrameRef(str(model), reads - 3, "__init__"),))
    assert unset_field(ctx, elsewhere, folder(tmp_path)) is None  # a line that does not read it: nothing claimed
