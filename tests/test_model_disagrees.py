"""A stop that says the model folder disagrees with itself (agent/repair/limits_weights.py): its checkpoint holds a
weight that vLLM's model class builds only under a config value its config.json does not give.

The server lab's vLLM (0.32.0) builds DeepSeek's ``gate.e_score_correction_bias`` only under ``topk_method ==
"noaux_tc"``; transformers' DeepSeek-V3 saves that bias whatever its config says, so a folder whose config.json
leaves ``topk_method`` out dies in ``load_weights`` (the space bench's first tiny DeepSeek-V3, before its maker
wrote what DeepSeek-V3's own checkpoints say).
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.repair.limits_weights import unbuilt_weight
from agent.repair.types import Fault, FrameRef
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import server_repair_context

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
