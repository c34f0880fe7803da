"""Write hs_<i>.safetensors files as vLLM's hidden-states connector does, straight from transformers (server lab venv).

python make_server_reference.py MODEL DATASET LAYERS OUT_RIGHT OUT_SHIFTED
OUT_RIGHT: layer id L = HF output_hidden_states[L] (the last id: the last layer's output before the final norm),
in bf16 like the server's. OUT_SHIFTED: every layer one further (L + 1), the in-process generator's convention.
"""

import os
import sys

import torch
from datasets import load_from_disk
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main() -> int:
    model_dir, dataset, layers, right, shifted = sys.argv[1:6]
    ids_of_layers = [int(x) for x in layers.split(",")]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    n = model.config.num_hidden_layers
    last: list = []
    model.model.layers[-1].register_forward_hook(lambda _m, _i, o: last.append(o[0] if isinstance(o, tuple) else o))
    rows = load_from_disk(dataset)
    for folder in (right, shifted):
        os.makedirs(folder, exist_ok=True)
    for index in range(len(rows)):
        ids = torch.as_tensor(rows[index]["input_ids"]).long().flatten()
        last.clear()
        with torch.no_grad():
            states = model(ids.unsqueeze(0), output_hidden_states=True).hidden_states
        by_id = [states[k][0] for k in range(n)] + [last[-1][0]]  # id n: the last layer before the final norm
        for folder, shift in ((right, 0), (shifted, 1)):
            stacked = torch.stack([by_id[min(k + shift, n)] for k in ids_of_layers], dim=1).to(torch.bfloat16)
            save_file({"hidden_states": stacked.contiguous(), "token_ids": ids}, f"{folder}/hs_{index}.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
