"""Check an extraction output against the model it came from (the job's own validator).

usage: python check_out.py OUT.pt [--model DIR] [--tolerance 0.05]

Every sample: hidden_states is [len(layer_ids), len(input_ids), hidden_size]. Its values: layer i against the
fp32 transformers forward pass's hidden_states[i + 1], within tolerance x that layer's max |value|.
Exit 0 when all of it holds, 1 when anything is wrong, 2 when the file cannot be read.
"""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--model", default="model")
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        data = torch.load(args.output, map_location="cpu", weights_only=False)
        layer_ids = [int(x) for x in data["layer_ids"]]
        samples = list(data["samples"])
    except Exception as exc:  # whatever torch or the format raises: unreadable
        print(f"check_out: cannot read {args.output}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    hidden = AutoConfig.from_pretrained(args.model).hidden_size
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    wrong = [] if samples else ["no samples"]
    worst = 0.0
    for n, sample in enumerate(samples):
        ids = torch.as_tensor(sample["input_ids"]).long().flatten()
        states = torch.as_tensor(sample["hidden_states"]).float()
        want = (len(layer_ids), len(ids), hidden)
        if tuple(states.shape) != want:
            wrong.append(f"sample {n}: hidden_states {tuple(states.shape)}, expected {want}")
            continue
        with torch.no_grad():
            reference = model(ids.unsqueeze(0), output_hidden_states=True).hidden_states
        for k, layer in enumerate(layer_ids):
            ref = reference[layer + 1][0]
            err = (states[k] - ref).abs().max().item()
            scale = max(ref.abs().max().item(), 1e-6)
            worst = max(worst, err / scale)
            if not err <= args.tolerance * scale:
                wrong.append(f"sample {n} layer {layer}: max abs error {err:.4f} > {args.tolerance} x {scale:.3f}")
    for line in wrong[:20]:
        print(f"WRONG: {line}")
    verdict = "NOT VERIFIED" if wrong else "VERIFIED"
    print(f"{verdict}: {len(samples)} samples, layers {layer_ids}, worst relative error {worst:.4f}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
