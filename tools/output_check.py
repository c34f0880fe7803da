"""medic's own check of an extraction output. Runs in the TARGET env (torch, transformers), sent on stdin:

    python - OUTPUT --model DIR [--layers 2,4,6] [--tolerance 0.05] [--sample 8] [--json]

OUTPUT is what the job saved with ``torch.save``: a list of sequences, one sequence, a dict holding a list of
them, or a folder of such files. A sequence is a dict with ``input_ids`` and ``hidden_states`` (a list of
``(len(input_ids), hidden_size)`` tensors, or one ``(layers, tokens, hidden)`` tensor) and, optionally,
``layer_ids``. Checked: for every sequence, the layer count and each tensor's shape against its input ids; for
a sample spread over the file, the values against HF transformers in fp32 with ``output_hidden_states=True``
(extracted layer ``i`` is ``hidden_states[i + 1]``), within ``tolerance`` x the layer's scale. Without layer ids
(neither in the file nor ``--layers``) each tensor is matched to the reference layer it is closest to, and named
by its slot (``slot 2, nearest layer 5``), not by that layer: a wrong tensor is nearest to some layer too. Two
slots that both hold one layer's values are wrong: an extraction saves each layer once.

Exit 0: verified; 1: wrong (the report's ``problems`` say what); 2: the output cannot be read (``readable``
false). The last line is the JSON report with ``--json``. Standard library, torch and transformers only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


class Unreadable(Exception):
    pass


def load_records(path: str) -> list[Any]:
    import torch

    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith((".pt", ".pth", ".bin")))
        if not files:
            raise Unreadable(f"{path} is a folder with no .pt files")
    records: list[Any] = []
    for name in files:
        try:
            data = torch.load(name, map_location="cpu", weights_only=False)
        except Exception as exc:  # whatever torch raises, the file is not readable
            raise Unreadable(f"cannot read {name}: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
        records += as_records(data, name)
    if not records:
        raise Unreadable(f"{path} holds no sequences")
    return records


def as_records(data: Any, name: str) -> list[Any]:
    if isinstance(data, dict) and "hidden_states" in data:
        return [data]
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, (list, tuple)) and v and isinstance(v[0], dict)]
        if lists:
            return list(lists[0])
    if isinstance(data, (list, tuple)) and all(isinstance(r, dict) for r in data):
        return list(data)
    raise Unreadable(f"{name} holds {type(data).__name__}, not sequences with hidden_states")


def layer_tensors(states: Any, hidden: int) -> list[Any]:
    import torch

    if isinstance(states, torch.Tensor):
        if states.dim() == 3:
            return list(states.unbind(0))
        if states.dim() == 2 and states.shape[-1] % hidden == 0 and states.shape[-1] > hidden:
            return list(states.split(hidden, dim=-1))  # layers concatenated along the hidden axis
        return [states]
    return [torch.as_tensor(t) for t in states]


def slot_name(layer_ids: list[int] | None, slot: int) -> str:
    """A tensor's name for people: its layer id when the output or the job says it, else its place."""
    return f"layer {layer_ids[slot]}" if layer_ids else f"slot {slot}"


def sample_indices(count: int, sample: int) -> set[int]:
    if sample <= 0 or sample >= count:
        return set(range(count))
    return {round(i * (count - 1) / max(sample - 1, 1)) for i in range(sample)}


def check(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    records = load_records(args.output)
    config = AutoConfig.from_pretrained(args.model)
    hidden = getattr(config, "hidden_size", None) or config.get_text_config().hidden_size
    given = [int(x) for x in args.layers.split(",")] if args.layers else None
    problems: list[str] = []
    passed: list[str] = []
    # the facts, as fields (what a repair reads; ``problems`` is for people): which sequences came back short
    # (fewer rows than tokens), which had another shape or layer count, which layers' values are off
    short: set[int] = set()
    misshapen: set[int] = set()
    layer_count: set[int] = set()
    off_layers: set[int] = set()
    per_layer: dict[int, float] = {}
    counts: set[int] = set()
    model = None
    values = sample_indices(len(records), args.sample)
    for index, record in enumerate(records):
        try:
            ids = torch.as_tensor(record["input_ids"]).long().flatten()
            states = layer_tensors(record["hidden_states"], hidden)
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            problems.append(f"sequence {index}: cannot read its fields ({type(exc).__name__}: {exc})")
            continue
        layer_ids = [int(x) for x in record["layer_ids"]] if record.get("layer_ids") is not None else given
        counts.add(len(states))
        if layer_ids is not None and len(states) != len(layer_ids):
            layer_count.add(index)
            problems.append(f"sequence {index}: {len(states)} layers, expected {len(layer_ids)}")
            continue
        wrong = [f"sequence {index} {slot_name(layer_ids, j)}: shape {tuple(t.shape)}, expected "
                 f"{(len(ids), hidden)}" for j, t in enumerate(states) if tuple(t.shape) != (len(ids), hidden)]
        problems += wrong
        for t in states:
            if tuple(t.shape) != (len(ids), hidden):
                rows_short = t.dim() == 2 and t.shape[-1] == hidden and t.shape[0] < len(ids)
                (short if rows_short else misshapen).add(index)
        if wrong or index not in values:
            continue
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            reference = model(ids.unsqueeze(0), output_hidden_states=True).hidden_states
        matched: dict[int, list[int]] = {}  # without ids: reference layer -> the slots whose values are it
        for j, tensor in enumerate(states):
            got = tensor.float()
            candidates = [layer_ids[j]] if layer_ids else list(range(len(reference) - 1))
            errors = {c: (got - reference[c + 1][0]).abs().max().item() for c in candidates if c + 1 < len(reference)}
            if not errors:
                problems.append(f"sequence {index}: layer {candidates[0]} is beyond the model's {len(reference) - 1}")
                continue
            layer = min(errors, key=lambda c: errors[c])
            name = f"layer {layer}" if layer_ids else f"slot {j}, nearest layer {layer}"
            scale = max(reference[layer + 1][0].abs().max().item(), 1e-6)
            per_layer[layer] = max(per_layer.get(layer, 0.0), errors[layer])
            if not errors[layer] <= args.tolerance * scale:
                off_layers.add(layer)
                problems.append(f"sequence {index} {name}: max abs error {errors[layer]:.4f} > "
                                f"{args.tolerance} x scale {scale:.3f}")
            else:
                matched.setdefault(layer, []).append(j)
                passed.append(f"sequence {index} {name}: max abs error {errors[layer]:.5f}")
        for layer, slots in matched.items():
            if len(slots) > 1:
                off_layers.add(layer)
                problems.append(f"sequence {index}: slots {', '.join(map(str, slots))} all hold layer {layer}'s "
                                f"values (an extraction saves each layer once)")
    if len(counts) > 1 and not given:
        problems.append(f"sequences differ in their number of layers: {sorted(counts)}")
    return {"verified": not problems, "readable": True, "sequences": len(records), "values_checked": len(values),
            "tolerance": args.tolerance, "max_abs_error_per_layer": per_layer, "problems": problems[:50],
            "passed": passed[:20], "short_sequences": sorted(short), "misshapen_sequences": sorted(misshapen),
            "layer_count_sequences": sorted(layer_count), "off_layers": sorted(off_layers)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="medic-check")
    parser.add_argument("output")
    parser.add_argument("--model", required=True)
    parser.add_argument("--layers", default="", help="layer ids, when the output does not hold them")
    parser.add_argument("--tolerance", type=float, default=0.05, help="max abs error / layer scale")
    parser.add_argument("--sample", type=int, default=8, help="check values of N sequences (0 = all)")
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
