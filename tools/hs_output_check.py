"""medic's own check of a hidden-state server job's output. Runs in the TARGET env, sent on stdin:

    python - OUTPUT --model DIR --dataset DIR --layers 2,4,5,8 --layouts JSON [--max-samples N] [--world-size W
             --rank R] [--sample 8] [--json]

OUTPUT is the folder the speculators client (≥ 0.5) fills with one ``hs_<row>.safetensors`` per dataset row;
``--layouts`` the records medic knows (tools/hs_layouts.py); the client's own ``--max-samples``, ``--world-size`` and
``--rank`` say which rows it was asked for (its get_indices_to_process: rank R's contiguous chunk of the first N).
Checked: every row's file is there, its token ids are the dataset's ``input_ids``, its states are
``[tokens, len(layers), hidden]`` and finite; a sample spread over the rows against HF transformers in fp32,
where layer id L is HF's ``hidden_states[L]`` (the input of decoder layer L) and id ``num_hidden_layers`` the last
layer's output before the final norm. An element may differ by ``tolerance`` x its layer's scale, plus the stored
dtype's own rounding (``finfo(dtype).eps`` x the value: an fp8 record keeps 3 mantissa bits).

Exit 0 verified, 1 wrong (``problems`` say what), 2 unreadable (``readable`` false: a record of no known layout,
no dataset...; the problem says what medic would need). The last line is the JSON report with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any


class Unreadable(Exception):
    pass


def sample_indices(count: int, sample: int) -> set[int]:
    if sample <= 0 or sample >= count:
        return set(range(count))
    return {round(i * (count - 1) / max(sample - 1, 1)) for i in range(sample)}


def rows_asked(count: int, max_samples: int | None, world_size: int, rank: int) -> list[int]:
    """The rows the client writes (speculators' data_generation/offline.py get_indices_to_process)."""
    target = min(max_samples, count) if max_samples is not None else count
    chunk, remainder = divmod(max(target, 0), world_size)
    start = rank * chunk + min(rank, remainder)
    return list(range(start, start + chunk + (1 if rank < remainder else 0)))


def pick_layout(keys: set[str], layouts: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for layout in layouts:  # the most specific first (a quantized record holds the plain one's keys too)
        if set(layout["keys"]) <= keys:
            return layout
    known = "; ".join(layout["describe"] for layout in layouts)
    raise Unreadable(f"{name} holds tensors {sorted(keys)}: no layout medic knows (it reads {known}). To check "
                     "this output medic needs its layout in tools/hs_layouts.py (tensor names and axes, read from the "
                     "client or connector that wrote it), or a --validate command")


def reference_states(model: Any, ids: Any) -> list[Any]:
    """HF's hidden states with the last entry replaced by the last decoder layer's output before the norm."""
    import torch

    layers = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList)
                  and len(m) == model.config.num_hidden_layers)
    last: list[Any] = []
    hook = layers[-1].register_forward_hook(lambda _m, _i, o: last.append(o[0] if isinstance(o, tuple) else o))
    try:
        with torch.no_grad():
            states = list(model(ids.unsqueeze(0), output_hidden_states=True).hidden_states)
    finally:
        hook.remove()
    states[-1] = last[-1]
    return [s[0] for s in states]


def check(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from safetensors import safe_open

    layouts = json.loads(args.layouts)
    if not os.path.isdir(args.output):
        raise Unreadable(f"no output folder at {args.output}")
    try:
        from datasets import load_from_disk

        rows = load_from_disk(args.dataset)
    except Exception as exc:  # whatever datasets raises, the rows cannot be read
        what = f"cannot read the dataset {args.dataset}: {type(exc).__name__}: {exc}"
        raise Unreadable(what.splitlines()[0]) from exc
    pattern = re.compile("^" + re.escape(args.file_name).replace(re.escape("{index}"), r"(\d+)") + "$")
    names = sorted(os.listdir(args.output))
    if names and not any(pattern.match(n) for n in names) and any(n.endswith(".safetensors") for n in names):
        raise Unreadable(f"{args.output} holds {', '.join(names[:5])}, no file named like {args.file_name}: "
                         f"medic needs the client's file names in tools/hs_layouts.py, or a --validate command")
    wanted = rows_asked(len(rows), args.max_samples, args.world_size, args.rank)
    layer_ids = [int(x) for x in args.layers.split(",") if x.strip()]
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(args.model)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden, n_layers = text.hidden_size, text.num_hidden_layers
    beyond = [x for x in layer_ids if not 0 <= x <= n_layers]
    if beyond:
        raise Unreadable(f"layer ids {beyond} are outside the model's 0..{n_layers}")
    problems: list[str] = []
    passed: list[str] = []
    per_layer: dict[int, float] = {}
    model = None
    values = {wanted[i] for i in sample_indices(len(wanted), args.sample)}
    used: set[str] = set()
    for row in wanted:
        name = args.file_name.format(index=row)
        path = os.path.join(args.output, name)
        if not os.path.exists(path):
            problems.append(f"row {row}: no {name}")
            continue
        try:
            with safe_open(path, framework="pt") as f:
                layout = pick_layout(set(f.keys()), layouts, name)
                tensors = {k: f.get_tensor(k) for k in layout["keys"]}
        except Unreadable:
            raise
        except Exception as exc:  # a truncated or garbled file is a wrong output, whatever safetensors raises
            problems.append(f"row {row}: {name} unreadable: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        used.add(layout["name"])
        ids = torch.as_tensor(rows[row]["input_ids"]).long().flatten()
        tokens = tensors[layout["tokens"]].long().flatten()
        if tokens.tolist() != ids.tolist():
            pairs = zip(tokens.tolist(), ids.tolist(), strict=False)
            at = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(tokens), len(ids)))
            problems.append(f"row {row}: {layout['tokens']} differ from the dataset's input_ids ({len(tokens)} vs "
                            f"{len(ids)} tokens, first difference at position {at})")
            continue
        states = tensors[layout["states"]]
        expected = (len(ids), len(layer_ids), hidden)
        if tuple(states.shape) != expected:
            what = (f"{states.shape[1]} layer slots, expected {len(layer_ids)} (layer ids {layer_ids} from the "
                    f"server's --speculative_config)" if states.dim() == 3 and states.shape[1] != len(layer_ids)
                    else f"shape {tuple(states.shape)}, expected {expected} (tokens, layers, hidden)")
            problems.append(f"row {row}: {layout['states']} {what}")
            continue
        stored = states.dtype
        got = states.float() * tensors[layout["scales"]].float() if layout.get("scales") else states.float()
        if not bool(torch.isfinite(got).all()):
            problems.append(f"row {row}: {layout['states']} hold non-finite values")
            continue
        if row not in values:
            continue
        if model is None:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        reference = reference_states(model, ids)
        rounding = torch.finfo(stored).eps if stored.is_floating_point else 0.0
        for slot, layer in enumerate(layer_ids):
            ref = reference[layer].float()
            scale = max(ref.abs().max().item(), 1e-6)
            diff = (got[:, slot, :] - ref).abs()
            error, beyond = diff.max().item(), (diff - rounding * ref.abs()).max().item()
            per_layer[layer] = max(per_layer.get(layer, 0.0), error)
            if not beyond <= args.tolerance * scale:
                dtype = str(stored).removeprefix("torch.")
                problems.append(f"row {row} layer {layer}: max abs error {error:.4f} ({beyond:.4f} beyond the stored "
                                f"{dtype}'s rounding) > {args.tolerance} x scale {scale:.3f}")
            else:
                passed.append(f"row {row} layer {layer}: max abs error {error:.5f}")
    return {"verified": not problems, "readable": True, "sequences": len(wanted), "values_checked": len(values),
            "layouts": sorted(used), "layer_ids": layer_ids, "tolerance": args.tolerance,
            "max_abs_error_per_layer": per_layer, "problems": problems[:50], "passed": passed[:20]}


def main() -> int:
    parser = argparse.ArgumentParser(prog="medic-hs-check")
    parser.add_argument("output")
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--layers", required=True, help="the layer ids the server extracts, in its order")
    parser.add_argument("--layouts", required=True, help="JSON: the records medic knows (tools/hs_layouts.py)")
    parser.add_argument("--file-name", default="hs_{index}.safetensors")
    parser.add_argument("--max-samples", type=int, default=None, help="the client's --max-samples")
    parser.add_argument("--world-size", type=int, default=1, help="the client's --world-size")
    parser.add_argument("--rank", type=int, default=0, help="the client's --rank")
    parser.add_argument("--tolerance", type=float, default=0.05, help="max abs error / layer scale")
    parser.add_argument("--sample", type=int, default=8, help="check values of N rows (0 = all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        report = check(args)
    except Unreadable as exc:
        report = {"verified": False, "readable": False, "problems": [str(exc)]}
    for line in report["problems"]:
        print(f"WRONG: {line}" if report["readable"] else f"UNREADABLE: {line}")
    for line in report.get("passed", []):
        print(f"ok: {line}")
    if args.json:
        print(json.dumps(report))
    return 0 if report["verified"] else (1 if report["readable"] else 2)


if __name__ == "__main__":
    sys.exit(main())
