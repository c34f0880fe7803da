"""Write extraction outputs straight from transformers (runs in the lab venv, not medic's).

python make_reference.py MODEL_DIR OUT_DIR  ->  OUT_DIR/{correct,wrong_shape,wrong_value}.pt

correct.pt is what a working driver saves: per sequence, hidden_states[i + 1][0] for each layer i, in bf16.
wrong_shape.pt keeps only the last row of every tensor; wrong_value.pt adds noise (std 0.3) to one layer.
"""

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

LAYER_IDS = [2, 4, 6]
# the driver's preamble: this tokenizer was trained on these prompts, so alone they are too few tokens
SYSTEM = "You are a helpful assistant. Answer the question below carefully, and verify the output. "
PROMPTS = [
    "The quick brown fox jumps over the lazy dog while the engineers wait for the model to load.",
    "Hidden states from intermediate layers train the EAGLE draft model for speculative decoding.",
    "Every release of the inference engine renames a method, removes a keyword or changes a shape.",
]


def main() -> int:
    model_dir, out_dir = sys.argv[1], Path(sys.argv[2])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    records = []
    for prompt in PROMPTS:
        ids = torch.tensor(tokenizer(SYSTEM + prompt)["input_ids"], dtype=torch.long)
        assert len(ids) >= 16, f"prompt too short: {len(ids)} tokens"
        with torch.no_grad():
            states = model(ids.unsqueeze(0), output_hidden_states=True).hidden_states
        layers = [states[i + 1][0].to(torch.bfloat16) for i in LAYER_IDS]
        records.append({"input_ids": ids, "hidden_states": layers, "layer_ids": LAYER_IDS})

    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(records, out_dir / "correct.pt")
    torch.save([{**r, "hidden_states": [t[-1] for t in r["hidden_states"]]} for r in records],
               out_dir / "wrong_shape.pt")
    noise = torch.Generator().manual_seed(0)
    wrong = [{**r, "hidden_states": list(r["hidden_states"])} for r in records]
    for record in wrong:
        first = record["hidden_states"][0]
        record["hidden_states"][0] = first + 0.3 * torch.randn(first.shape, generator=noise).to(first.dtype)
    torch.save(wrong, out_dir / "wrong_value.pt")
    print(f"wrote {len(records)} sequences to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
