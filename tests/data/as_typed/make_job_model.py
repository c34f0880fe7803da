"""A tiny random-weight Llama for the as-typed job, of its own size (not the lab's), with the lab's locally
trained tokenizer recipe (no download). Runs in the lab venv:  python make_job_model.py OUT_DIR LAB_TARGET_DIR
"""

import json
import os
import sys

# head_dim = hidden_size / num_attention_heads must be 64 for vLLM's CPU attention; grouped KV heads as Llama 3
DIMS = dict(hidden_size=192, num_attention_heads=3, num_key_value_heads=1, num_hidden_layers=6,
            intermediate_size=320, vocab_size=512)


def main():
    out_dir, lab_target = sys.argv[1], sys.argv[2]
    sys.path.insert(0, lab_target)
    import torch
    from make_model import build_tokenizer  # the lab's own tokenizer recipe (lab/target/make_model.py)
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(out_dir, exist_ok=True)
    fast = build_tokenizer(out_dir, DIMS["vocab_size"])
    config = LlamaConfig(**DIMS, max_position_embeddings=1024, torch_dtype="bfloat16", tie_word_embeddings=False,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, rms_norm_eps=1e-5)
    torch.manual_seed(14)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    with open(os.path.join(out_dir, "job-model.json"), "w") as fh:
        json.dump(DIMS, fh)
    print(f"model written to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
