"""Verify an extraction output against a reference forward pass (runs in the lab venv).

python check.py OUTPUT --model DIR [--tolerance 0.05] [--sample N] [--json]

For every sequence: the number of layers, and each tensor's shape (len(input_ids), hidden_size).
For a sample of sequences (all by default): values against HF transformers in fp32 with
output_hidden_states=True, where extracted layer i is reference hidden_states[i + 1]. The tolerance is relative
to the layer's scale (its max |value| in the reference): bf16 extraction lands within ~2% of it on the tiny and
the large lab model alike, while a wrong fix is off by the scale itself.
Exit 0 only when everything checked is right; 1 when the output is wrong; 2 when it cannot be read.
"""

import argparse
import json
import sys


def fail_input(message: str) -> int:
    print(f"check: {message}", file=sys.stderr)
    return 2


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tolerance", type=float, default=0.05, help="max abs error / layer scale")
    parser.add_argument("--sample", type=int, default=0, help="check values of N sequences (0 = all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        records = torch.load(args.output, map_location="cpu", weights_only=False)
    except Exception as exc:  # any unreadable file is bad input, whatever torch raises
        return fail_input(f"cannot read {args.output}: {type(exc).__name__}: {exc}".splitlines()[0])
    if not isinstance(records, list) or not records:
        return fail_input(f"{args.output} holds no list of sequences")

    config = AutoConfig.from_pretrained(args.model)
    hidden = config.hidden_size
    problems: list[str] = []
    per_layer: dict[int, float] = {}
    model = None
    sample = len(records) if args.sample <= 0 else min(args.sample, len(records))
    for index, record in enumerate(records):
        try:
            ids = torch.as_tensor(record["input_ids"]).long().flatten()
            states = list(record["hidden_states"])
            layer_ids = [int(x) for x in record["layer_ids"]]
        except (KeyError, TypeError) as exc:
            problems.append(f"sequence {index}: missing field {exc}")
            continue
        if len(states) != len(layer_ids):
            problems.append(f"sequence {index}: {len(states)} layers, expected {len(layer_ids)}")
            continue
        shapes_ok = True
        for layer, tensor in zip(layer_ids, states, strict=False):
            shape = tuple(torch.as_tensor(tensor).shape)
            if shape != (len(ids), hidden):
                problems.append(f"sequence {index} layer {layer}: shape {shape}, expected {(len(ids), hidden)}")
                shapes_ok = False
        if not shapes_ok or index >= sample:
            continue
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            reference = model(ids.unsqueeze(0), output_hidden_states=True).hidden_states
        for layer, tensor in zip(layer_ids, states, strict=False):
            ref = reference[layer + 1][0]
            err = (torch.as_tensor(tensor).float() - ref).abs().max().item()
            scale = max(ref.abs().max().item(), 1e-6)
            per_layer[layer] = max(per_layer.get(layer, 0.0), err)
            if not err <= args.tolerance * scale:
                problems.append(f"sequence {index} layer {layer}: max abs error {err:.4f} > {args.tolerance} x "
                                f"scale {scale:.3f}")

    verified = not problems
    report = {
        "verified": verified,
        "sequences": len(records),
        "values_checked": sample,
        "tolerance": args.tolerance,
        "max_abs_error_per_layer": per_layer,
        "problems": problems[:50],
    }
    if args.json:
        print(json.dumps(report))
    else:
        for layer, err in sorted(per_layer.items()):
            print(f"layer {layer}: max abs error {err:.5f}")
        for line in problems[:50]:
            print(f"WRONG: {line}")
        word = "VERIFIED" if verified else "NOT VERIFIED"
        print(f"{word}: {len(records)} sequences, shapes checked for all, values for {sample} (tol {args.tolerance})")
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
