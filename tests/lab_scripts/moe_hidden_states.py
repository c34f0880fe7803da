"""A hidden-state folder as a bf16 server writes one, made by HF transformers instead of vLLM (no server needed).

python moe_hidden_states.py MODEL DATASET OUT --layers 1,2,3 [--rows 8] [--tokens 48] [--seed 7]   (a lab python)

DATASET gets ``--rows`` rows of random ``input_ids``; OUT one ``hs_<row>.safetensors`` per row (``token_ids``,
``hidden_states [tokens, layers, hidden]`` in bf16; layer id L is HF's ``hidden_states[L]``), computed in bf16
with its embeddings nudged by half a unit in the last place — another implementation's rounding, as vLLM's
kernels round otherwise than HF's: a mixture-of-experts router's near-ties then go another way at a few tokens.
"""

import argparse
import os
import sys

import torch
from datasets import Dataset
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("dataset")
    parser.add_argument("out")
    parser.add_argument("--layers", required=True)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    layers = [int(x) for x in args.layers.split(",")]
    generator = torch.Generator().manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).eval()
    vocab = model.config.vocab_size
    rows = [torch.randint(3, vocab, (args.tokens,), generator=generator) for _ in range(args.rows)]
    Dataset.from_dict({"input_ids": [r.tolist() for r in rows]}).save_to_disk(args.dataset)
    step = torch.finfo(torch.bfloat16).eps / 2
    model.get_input_embeddings().register_forward_hook(
        lambda _m, _i, out: out * (1 + torch.randint(-1, 2, out.shape, generator=generator).to(out.dtype) * step))
    os.makedirs(args.out, exist_ok=True)
    for index, ids in enumerate(rows):
        with torch.no_grad():
            states = model(ids.unsqueeze(0), output_hidden_states=True).hidden_states
        stacked = torch.stack([states[layer][0] for layer in layers], dim=1)
        save_file({"token_ids": ids.contiguous(), "hidden_states": stacked.contiguous()},
                  os.path.join(args.out, f"hs_{index}.safetensors"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
