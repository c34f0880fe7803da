"""Build a tiny random-weight Llama and a locally trained BPE tokenizer (no download).

Runs in the lab venv:  python make_model.py OUT_DIR [--size tiny|large]
"""

import argparse
import json
import os
import sys

SIZES = {
    # head_dim must be one the vLLM CPU attention supports: 64 works, 16 does not.
    "tiny": dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=8,
                 intermediate_size=256, vocab_size=512),
    # big enough that loading the weights dominates a launch on a 2-core machine (a few GB of bf16).
    "large": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=24,
                  intermediate_size=8192, vocab_size=512),
}

CORPUS = [
    "The quick brown fox jumps over the lazy dog while the engineers wait for the model to load.",
    "Hidden states from intermediate layers train the EAGLE draft model for speculative decoding.",
    "Every release of the inference engine renames a method, removes a keyword or changes a shape.",
    "A long job on a GPU host dies twenty minutes in, and somebody reads the traceback again.",
    "Verified output means the right shapes and values that match a reference forward pass.",
]


def build_tokenizer(out_dir: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out_dir)
    return fast


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dims = SIZES[args.size]
    os.makedirs(args.out_dir, exist_ok=True)
    fast = build_tokenizer(args.out_dir, dims["vocab_size"])
    config = LlamaConfig(
        **dims, max_position_embeddings=2048, torch_dtype="bfloat16", tie_word_embeddings=False,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, rms_norm_eps=1e-5,
    )
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    json.dump({"size": args.size, **dims}, open(os.path.join(args.out_dir, "medic-model.json"), "w"))
    print(f"model written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
