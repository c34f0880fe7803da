"""Extract hidden states with speculators on vLLM — written top to bottom, with no ``__main__`` guard.

python extract_unguarded.py --model DIR --out FILE

Under the fork start method this runs; under spawn (which CUDA forces) each worker re-imports this file.
"""

import argparse

import torch
from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator
from transformers import AutoTokenizer

SYSTEM = "You are a helpful assistant. Answer the question below carefully, and verify the output. "
PROMPTS = [
    "The quick brown fox jumps over the lazy dog while the engineers wait for the model to load.",
    "Hidden states from intermediate layers train the EAGLE draft model for speculative decoding.",
    "Every release of the inference engine renames a method, removes a keyword or changes a shape.",
    "A long job on a GPU host dies twenty minutes in, and somebody reads the traceback again.",
]

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--layers", default="2,4,6")
args = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(args.model)
layer_ids = [int(x) for x in args.layers.split(",")]
generator = VllmHiddenStatesGenerator(args.model, layer_ids=layer_ids, max_model_len=256)


def record(result):
    return {"input_ids": result["input_ids"], "hidden_states": result["hidden_states"], "layer_ids": layer_ids}


records = []
for batch in (PROMPTS[:2], PROMPTS[2:]):
    token_ids = [tokenizer(SYSTEM + p)["input_ids"] for p in batch]
    records.extend(record(r) for r in generator.generate(token_ids))
    print(f"extracted batch of {len(batch)} sequences")

torch.save(records, args.out)
print(f"saved {len(records)} sequences to {args.out}")
