"""Dump EAGLE-3 training features (intermediate hidden states) for a prompt set, with speculators on vLLM.

usage: python driver.py MODEL_DIR -o OUT.pt [--layer-ids 1,3,4] [--batch-size 3] [--prompts FILE]

OUT.pt holds {"model", "layer_ids", "samples": [{"input_ids": LongTensor[T], "hidden_states": Tensor[L, T, H]}]}.
"""

import argparse
import json
import sys
import time

import torch
from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator
from transformers import AutoTokenizer

# chat-formatted samples all open with the same system turn
SYSTEM_TURN = "System: You are a careful assistant. Read the request, think, then answer briefly.\nUser: "

DEFAULT_PROMPTS = [
    "Which layer of the model do the draft heads read their features from?",
    "Summarise why a prefill-only pass is enough to collect the training features.",
    "The inference engine changed a signature again; what breaks first?",
    "List three things a reference forward pass can tell you about extracted states.",
    "Why does a shared system prompt matter for a cache of prefix blocks?",
]


def read_prompts(path):
    if path is None:
        return list(DEFAULT_PROMPTS)
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)["prompt"] for line in fh if line.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--layer-ids", default="1,3,4")
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--prompts", default=None, help="a .jsonl file of {'prompt': ...} lines")
    parser.add_argument("--max-len", type=int, default=384)
    args = parser.parse_args(argv)

    layer_ids = [int(part) for part in args.layer_ids.split(",") if part.strip()]
    prompts = read_prompts(args.prompts)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    started = time.time()
    generator = VllmHiddenStatesGenerator(args.model_dir, layer_ids=layer_ids, max_model_len=args.max_len)
    print(f"generator ready in {time.time() - started:.1f}s", flush=True)

    samples = []
    for start in range(0, len(prompts), args.batch_size):
        chunk = prompts[start:start + args.batch_size]
        encoded = [tokenizer(SYSTEM_TURN + prompt + "\nAssistant:")["input_ids"] for prompt in chunk]
        for row in generator.generate(encoded):
            samples.append({
                "input_ids": torch.as_tensor(row["input_ids"], dtype=torch.long),
                "hidden_states": torch.stack([h.to(torch.float32) for h in row["hidden_states"]]),
            })
        print(f"{len(samples)}/{len(prompts)} samples", flush=True)

    torch.save({"model": args.model_dir, "layer_ids": layer_ids, "samples": samples}, args.output)
    print(f"wrote {len(samples)} samples to {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
