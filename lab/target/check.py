"""Verify an extraction output against a reference forward pass (runs in the lab venv).

python check.py OUTPUT --model DIR [--tolerance 0.05] [--sample N] [--json]

For every sequence: the number of layers, and each tensor's shape (len(input_ids), hidden_size).
For a sample of sequences (all by default): values against HF transformers in fp32 with
output_hidden_states=True, where extracted layer i is reference hidden_states[i + 1]. The tolerance is relative
to the layer's scale (its max |value| in the reference): bf16 extraction lands within ~2% of it on the tiny and
the large lab model alike, while a wrong fix is off by the scale itself. A token over it is judged against the
model's own precision, as the server lab's checker judges it (check_server.py, beside this file: one copy of the
rule): excused when HF's own forward in the model's dtype moves as far at that layer (a mixture-of-experts router's
near-tie), and the layer fails when more of its tokens are over than that forward's own share.
Exit 0 only when everything checked is right; 1 when the output is wrong; 2 when it cannot be read.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_server import PERTURBED, job_dtype, judge_pooled, token_errors  # beside this file in the lab


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
    pending: list[tuple[int, Any, list[int], list[Any]]] = []
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
        if shapes_ok and index < sample:
            pending.append((index, ids, layer_ids, [torch.as_tensor(t).float() for t in states]))
    if pending:
        model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
        exact = [forward(model, ids) for _, ids, _, _ in pending]
        dtype = job_dtype(config, "auto")
        near: list[list[Any]] = [[] for _ in pending]
        over = any(bool((token_errors(got, ref[layer + 1], 0.0) > args.tolerance * ref[layer + 1].abs().max()).any())
                   for (_, _, layers, states), ref in zip(pending, exact, strict=True)
                   for layer, got in zip(layers, states, strict=True))
        if over and dtype != torch.float32:  # how far HF's own forward in the model's dtype moves, where it matters
            model = model.to(dtype)
            near = [[forward(model, ids), *(nudged(model, ids, dtype, seed) for seed in range(PERTURBED))]
                    for _, ids, _, _ in pending]
        for layer in sorted({layer for _, _, layers, _ in pending for layer in layers}):
            pooled = judge_pooled([(index, states[layers.index(layer)], ref_row[layer + 1],
                                    [n[layer + 1] for n in near_row])
                                   for (index, _, layers, states), ref_row, near_row in zip(pending, exact, near,
                                                                                            strict=True)
                                   if layer in layers], args.tolerance)
            per_layer[layer] = pooled["max"]
            if (first := pooled["first"]) is not None:
                problems.append(f"sequence {first['row']} layer {layer}: max abs error {first['error']:.4f} > "
                                f"{args.tolerance} x scale {first['bound'] / args.tolerance:.3f}, beyond the "
                                f"{str(dtype).removeprefix('torch.')} forward's own precision "
                                f"({first['over']} of {first['tokens']} tokens over)")

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


def forward(model: Any, ids: Any) -> list[Any]:
    """HF's hidden states of one sequence (embeddings first), in fp32."""
    import torch

    with torch.no_grad():
        return [h[0].float() for h in model(ids.unsqueeze(0), output_hidden_states=True).hidden_states]


def nudged(model: Any, ids: Any, dtype: Any, seed: int) -> list[Any]:
    """The model-dtype forward once more, its embeddings moved by half a unit in the last place at random: the
    rounding another implementation of the same dtype may do differently (check_server.perturbed's nudge)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    step = torch.finfo(dtype).eps / 2

    def nudge(_module: Any, _inputs: Any, out: Any) -> Any:
        return out * (1 + torch.randint(-1, 2, out.shape, generator=generator).to(out.dtype) * step)

    hook = model.get_input_embeddings().register_forward_hook(nudge)
    try:
        return forward(model, ids)
    finally:
        hook.remove()


if __name__ == "__main__":
    sys.exit(main())
