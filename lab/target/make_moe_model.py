"""Build a tiny random-weight mixture-of-experts model (GPT-OSS or Qwen3-MoE) beside make_model.py's Llama: the
same locally trained tokenizer, hidden 128 and head_dim 64 (a head size vLLM's CPU attention supports).

Runs in a venv whose transformers builds the architecture:  python make_moe_model.py OUT_DIR --arch gpt_oss
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_model import build_tokenizer  # the lab's own tokenizer, next to this file

SHARED = dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=64, num_hidden_layers=4,
              vocab_size=512, rms_norm_eps=1e-5, tie_word_embeddings=False)
ARCHS = {
    # experts small enough for a CPU, several per token so the router has near-ties to resolve
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(intermediate_size=128, num_local_experts=8,
                                                          num_experts_per_tok=2, sliding_window=16)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(intermediate_size=256, moe_intermediate_size=64,
                                                                num_experts=8, num_experts_per_tok=2,
                                                                max_position_embeddings=2048)),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--arch", choices=sorted(ARCHS), required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    import transformers

    config_name, model_name, dims = ARCHS[args.arch]
    os.makedirs(args.out_dir, exist_ok=True)
    fast = build_tokenizer(args.out_dir, SHARED["vocab_size"])
    config = getattr(transformers, config_name)(**SHARED, **dims, bos_token_id=fast.bos_token_id,
                                                eos_token_id=fast.eos_token_id, pad_token_id=fast.eos_token_id)
    config.dtype = torch.bfloat16  # what vLLM serves it in (auto)
    torch.manual_seed(args.seed)
    model = getattr(transformers, model_name)(config).to(torch.bfloat16)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    json.dump({"arch": args.arch, **SHARED, **dims}, open(os.path.join(args.out_dir, "medic-model.json"), "w"))
    print(f"model written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
