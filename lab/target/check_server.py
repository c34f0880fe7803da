"""Verify the server lab's output: one hs_<i>.safetensors per dataset row, against an fp32 HF forward pass.

python check_server.py OUTPUT_DIR --model DIR --dataset DIR --layers 2,4,5,8 [--tolerance 0.05] [--json]

Each file holds ``token_ids [T]`` and ``hidden_states [T, n_layers, hidden]`` (what vLLM's
ExampleHiddenStatesConnector writes). In this API a layer id L is the INPUT of decoder layer L, i.e. HF's
``output_hidden_states[L]``; an id equal to num_hidden_layers is the last layer's output before the final norm
(HF's last entry has the norm applied, so it is taken with a hook instead). The tolerance is relative to each
layer's scale, as in the first lab's checker. Exit 0 only when every row is there and right; 1 when the output
is wrong or missing rows; 2 when it cannot be read.
"""

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--layers", required=True, help="comma-separated layer ids the server extracts")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch
    from datasets import load_from_disk
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = Path(args.output)
    if not out.is_dir():
        print(f"check: no output folder at {out}", file=sys.stderr)
        return 2
    layers = [int(x) for x in args.layers.split(",") if x.strip()]
    rows = load_from_disk(args.dataset)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    n_layers = model.config.num_hidden_layers
    hidden = model.config.hidden_size
    last_out: list = []
    model.model.layers[-1].register_forward_hook(
        lambda _m, _i, o: last_out.append(o[0] if isinstance(o, tuple) else o))
    problems: list[str] = []
    per_layer: dict[int, float] = {}
    for index in range(len(rows)):
        ids = torch.as_tensor(rows[index]["input_ids"]).long().flatten()
        path = out / f"hs_{index}.safetensors"
        if not path.exists():
            problems.append(f"row {index}: no {path.name}")
            continue
        try:
            data = load_file(str(path))
            states, tokens = data["hidden_states"], data["token_ids"]
        except Exception as exc:  # an unreadable file is a wrong output here, whatever safetensors raises
            problems.append(f"row {index}: {path.name} unreadable: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        if tokens.tolist() != ids.tolist():
            problems.append(f"row {index}: token_ids differ from the dataset's input_ids")
            continue
        if tuple(states.shape) != (len(ids), len(layers), hidden):
            problems.append(f"row {index}: shape {tuple(states.shape)}, expected {(len(ids), len(layers), hidden)}")
            continue
        last_out.clear()
        with torch.no_grad():
            reference = model(ids.unsqueeze(0), output_hidden_states=True).hidden_states
        for k, layer in enumerate(layers):
            ref = last_out[-1][0] if layer == n_layers else reference[layer][0]
            err = (states[:, k, :].float() - ref).abs().max().item()
            scale = max(ref.abs().max().item(), 1e-6)
            per_layer[layer] = max(per_layer.get(layer, 0.0), err)
            if not err <= args.tolerance * scale:
                problems.append(f"row {index} layer {layer}: max abs error {err:.4f} > {args.tolerance} x "
                                f"scale {scale:.3f}")
    verified = not problems
    report = {"verified": verified, "sequences": len(rows), "values_checked": len(rows),
              "tolerance": args.tolerance, "max_abs_error_per_layer": per_layer, "problems": problems[:50]}
    if args.json:
        print(json.dumps(report))
    else:
        for layer, err in sorted(per_layer.items()):
            print(f"layer {layer}: max abs error {err:.5f}")
        for line in problems[:50]:
            print(f"WRONG: {line}")
        word = "VERIFIED" if verified else "NOT VERIFIED"
        print(f"{word}: {len(rows)} rows, token ids, shapes and values checked (tol {args.tolerance})")
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
