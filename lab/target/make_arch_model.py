"""Build a tiny random-weight model of any transformers causal-LM architecture, with the lab's locally trained
tokenizer (no download). The architectures drafts are trained for, beside make_model.py's Llama.

Runs in a lab venv:  python make_arch_model.py OUT_DIR --arch Qwen3ForCausalLM [--seed 0]
                     python make_arch_model.py OUT_DIR --arch A,B,C --config-only   (OUT_DIR/<arch>/config.json)

The config is the architecture's own config class with the lab model's dimensions (make_model.py's "tiny": hidden
128, head_dim 64 — a head size vLLM's CPU attention supports — 8 layers, vocab 512); a dimension is set only where
the config class has that field, so each architecture keeps its own defaults for everything else. A separate file
from make_model.py on purpose: that file's digest is the labs' model step key, and the Llama must not change.
Exit 0 when every model (or config) was written; 1 when an architecture could not be built; 2 on bad input.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model import SIZES, build_tokenizer

TINY = SIZES["tiny"]
HEAD_DIM = TINY["hidden_size"] // TINY["num_attention_heads"]  # 64
# fields of the lab's shape, each applied only when the architecture's config class has it
SHAPE = {**TINY, "head_dim": HEAD_DIM, "max_position_embeddings": 2048, "tie_word_embeddings": False,
         "rms_norm_eps": 1e-5}
# a mixture of experts, kept tiny: 4 experts, 2 per token or the family's own fewer (names differ between families)
EXPERTS = {"num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "n_shared_experts": 1,
           "num_experts_per_tok": 2, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
           "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}
# multi-head latent attention (DeepSeek): DeepSeek's own latent and rope widths (512 + 64), the one head size vLLM's
# CPU MLA backend takes (AMXMLABackend.get_supported_head_sizes: [576]); the heads themselves stay small
# (the query's own low rank stays each class's default: MiniCPM3's attention needs one, DeepSeek takes either)
LATENT = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 64, "v_head_dim": HEAD_DIM}
# what a family's published checkpoints say and transformers' config class does not write: DeepSeek-V3's router is
# always the bias-corrected one in transformers (it saves ``e_score_correction_bias``), which vLLM builds only for
# ``topk_method: noaux_tc``, as deepseek-ai/DeepSeek-V3's config.json says
CHECKPOINT_SAYS = {"deepseek_v3": {"topk_method": "noaux_tc"}}


def fail(message: str, code: int) -> int:
    print(f"make_arch_model: {message}", file=sys.stderr)
    return code


def model_class(name: str):
    import transformers

    cls = getattr(transformers, name, None)
    if cls is None or not hasattr(cls, "config_class"):
        return None
    return cls


def tiny_config(cls, bos: int, eos: int, pad: int | None = None):
    """The architecture's own config class, with the lab's shape where it has the field."""
    config_cls = cls.config_class
    defaults = config_cls()
    wanted = {**SHAPE, **EXPERTS, **LATENT, "bos_token_id": bos, "eos_token_id": eos}
    fields = {k: v for k, v in wanted.items() if hasattr(defaults, k)}
    own_top_k = getattr(defaults, "num_experts_per_tok", None)
    if isinstance(own_top_k, int) and 0 < own_top_k < EXPERTS["num_experts_per_tok"]:
        fields["num_experts_per_tok"] = own_top_k  # a family that routes fewer per token (Llama 4: one) keeps it
    own_pad = getattr(defaults, "pad_token_id", None)
    if isinstance(own_pad, int) and own_pad >= TINY["vocab_size"]:  # the family's pad id, beyond the tiny vocabulary
        fields["pad_token_id"] = pad  # (Phi-3's 32000, GLM's 151329): the tokenizer's own, or none
    config = config_cls(**fields, **CHECKPOINT_SAYS.get(getattr(defaults, "model_type", ""), {}))
    config.architectures = [cls.__name__]
    return config


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--arch", required=True, help="a transformers *ForCausalLM class name (comma-separated "
                                                      "with --config-only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config-only", action="store_true", help="write each config.json, no tokenizer or weights")
    args = parser.parse_args()
    names = [n.strip() for n in args.arch.split(",") if n.strip()]
    if not names or (len(names) > 1 and not args.config_only):
        return fail("--arch takes one architecture (several only with --config-only)", 2)
    classes = {n: model_class(n) for n in names}
    if args.config_only:  # one line per architecture, "NAME: ok MODEL_TYPE" or "NAME: why not"
        failed = 0
        for name, cls in classes.items():
            folder = os.path.join(args.out_dir, name)
            if cls is None:
                print(f"{name}: transformers has no model class {name}")
                failed += 1
                continue
            try:
                config = tiny_config(cls, 1, 2)
            except Exception as exc:  # any architecture transformers cannot configure this way: report, go on
                print(f"{name}: {type(exc).__name__}: {exc}".splitlines()[0])
                failed += 1
                continue
            os.makedirs(folder, exist_ok=True)
            config.save_pretrained(folder)
            print(f"{name}: ok {config.model_type}")
        return 1 if failed else 0

    name, cls = names[0], classes[names[0]]
    if cls is None:
        return fail(f"transformers has no model class {name}", 2)
    import torch

    os.makedirs(args.out_dir, exist_ok=True)
    fast = build_tokenizer(args.out_dir, TINY["vocab_size"])
    config = tiny_config(cls, fast.bos_token_id, fast.eos_token_id, fast.pad_token_id)
    torch.manual_seed(args.seed)
    model = cls(config).to(torch.bfloat16)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    with open(os.path.join(args.out_dir, "medic-model.json"), "w") as out:
        json.dump({"size": "tiny", "arch": name, "model_type": config.model_type, **TINY}, out)
    print(f"{name} model written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
