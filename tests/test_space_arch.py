"""The space bench's architectures column: which architectures are read from vLLM's own source, and each one's
tiny config is built by the lab's transformers (no vLLM launch)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.space_arch import MAKER, eagle3_architectures, models_dir
from lab.build import LabPaths

MODEL = "class {name}({bases}):\n    pass\n"


def write_models(root: Path, registry: dict[str, tuple[str, str]], classes: dict[str, list[tuple[str, str]]]) -> Path:
    models = root / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    (models / "interfaces.py").write_text("class SupportsEagle3:\n    pass\n")
    (models / "registry.py").write_text(f"_TEXT_GENERATION_MODELS = {registry!r}\n")
    for module, defs in classes.items():
        (models / f"{module}.py").write_text("".join(MODEL.format(name=n, bases=b) for n, b in defs))
    return models


def test_architectures_are_read_from_the_installed_vllm_source(tmp_path: Path) -> None:
    """Names no real vLLM has: a hard-coded list cannot pass. A subclass of a supporting class supports too, and
    an architecture is the registry's name, whatever its class is called."""
    models = write_models(
        tmp_path,
        {"FooForCausalLM": ("foo", "FooForCausalLM"), "RenamedForCausalLM": ("foo", "FooChild"),
         "BarForCausalLM": ("bar", "BarForCausalLM"), "FooModel": ("foo", "FooForCausalLM")},
        {"foo": [("FooForCausalLM", "nn.Module, SupportsPP, SupportsEagle3"), ("FooChild", "FooForCausalLM")],
         "bar": [("BarForCausalLM", "nn.Module, SupportsPP")]},
    )
    assert eagle3_architectures(models) == {"BarForCausalLM": False, "FooForCausalLM": True,
                                            "RenamedForCausalLM": True}


@pytest.mark.lab
def test_each_eagle3_architecture_gets_a_tiny_config_from_the_lab_transformers(lab: LabPaths, tmp_path: Path) -> None:
    archs = eagle3_architectures(models_dir(lab.root))
    assert archs["Qwen3MoeForCausalLM"] and archs["MistralForCausalLM"] and not archs["Gemma3ForCausalLM"]
    wanted = [a for a, ok in archs.items() if ok] + ["Gemma3ForCausalLM"]
    done = subprocess.run([str(lab.python), str(MAKER), str(tmp_path), "--arch", ",".join(wanted), "--config-only"],
                          capture_output=True, text=True, timeout=600)
    said = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert set(said) == set(wanted), done.stderr[-2000:]
    built = [a for a, word in said.items() if word.startswith("ok ")]
    # every other line is transformers' own refusal, never a crash of the maker
    assert all(a in built or word.startswith("transformers has no model class") for a, word in said.items()), said
    assert {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM", "Gemma3ForCausalLM"} <= set(built)
    for arch in built:
        config = json.loads((tmp_path / arch / "config.json").read_text())
        assert config["architectures"] == [arch]
        assert config["hidden_size"] == 128 and config["num_hidden_layers"] == 8, arch
        if "head_dim" in config:
            assert config["head_dim"] == 64, arch  # a head size vLLM's CPU attention supports
        for experts in ("num_experts", "num_local_experts"):
            if experts in config:
                assert config[experts] == 4, arch
    # two experts a token, or the family's own fewer: Llama 4 routes one (vLLM applies its router weight to the
    # input, which it implements for one expert only)
    top_k = {a: json.loads((tmp_path / a / "config.json").read_text()).get("num_experts_per_tok") for a in built}
    assert top_k["Qwen3MoeForCausalLM"] == 2 and top_k["GptOssForCausalLM"] == 2
    assert top_k["Llama4ForCausalLM"] == 1


def test_the_totals_count_a_model_transformers_cannot_build_apart_and_an_honest_stop_as_one() -> None:
    from bench.space_arch_report import totals

    runs = [{"eagle3": True, "outcome": "verified", "verified": True, "kept": [{"origin": "x"}], "arch": "A",
             "needed": ["x"], "needless": []},
            {"eagle3": True, "outcome": "no_repair", "honest_stop": True},
            {"eagle3": True, "outcome": "no model"},
            {"eagle3": False, "outcome": "no_repair", "honest_stop": True, "kept": []}]
    line = totals(runs)
    assert line.startswith("runs=3 eagle3_runs=2 verified=1 eagle3_honest_stops=1 false_success=0 unsupported_runs=1")
    assert line.endswith("no_model=1 kept_changes=1 necessity_archs=1 needless=0 wrong=0")


def test_another_pair_is_read_from_its_own_lab_and_named_in_its_rows(tmp_path: Path) -> None:
    """--pair: the architectures come from that pair's vLLM (the lab `make test` builds beside the default one),
    its rows name it; a row written before rows named their pair shows its flavour's default lab."""
    from bench.space_arch import plan
    from bench.space_arch_report import row_cells

    items = plan("inprocess", ["LlamaForCausalLM", "Gemma3ForCausalLM"], "Gemma3ForCausalLM", tmp_path, "0.3.0:0.18.1")
    assert [(i["arch"], i["pair"], i["release"], i["eagle3"]) for i in items] == [
        ("LlamaForCausalLM", "0.3.0:0.18.1", "0.3.0:0.18.1", True),
        ("Gemma3ForCausalLM", "0.3.0:0.18.1", "0.3.0:0.18.1", False)]
    assert row_cells({**items[0], "outcome": "verified"})[2] == "0.3.0:0.18.1"
    assert row_cells({"arch": "LlamaForCausalLM", "flavour": "server"})[2] == "0.9.0:0.32.0"
    assert row_cells({"arch": "LlamaForCausalLM", "flavour": "inprocess"})[2] == "0.3.0:0.16.0"
