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

Each token is judged apart, and where the job computes in a lower precision (``--dtype``, default the model's
own) against HF in that dtype too: a token over the bound is right to the model's precision when it lands within
what that reference itself moves at the layer (``judge_layer``, as in tools/hs_output_check.py: a mixture-of-
experts router's near-ties send a few tokens to another expert under bf16). The report gives each layer's median
per-token error and the outlier tokens.

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


# as tools/hs_output_check.py: each check is sent alone on stdin, so token_errors, judge_layer, perturbed and
# job_dtype are copies, kept the same in both (tests/test_moe_output_check.py asserts it)
PRECISION_MARGIN = 2.0
PERTURBED = 2
MAX_OUTLIERS = 20


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


def job_dtype(config: Any, given: str) -> Any:
    """The dtype the job computes in: ``--dtype`` as vLLM's option says it, or the model's own (``auto``)."""
    import torch

    name = given if given and given != "auto" else str(getattr(config, "dtype", None)
                                                        or getattr(config, "torch_dtype", None) or "float32")
    name = {"half": "float16", "bfloat": "bfloat16", "float": "float32"}.get(name, name).removeprefix("torch.")
    dtype = getattr(torch, name, None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def token_errors(got: Any, ref: Any, rounding: float) -> Any:
    """Each token's largest element error beyond the stored dtype's own rounding."""
    return ((got - ref).abs() - rounding * ref.abs()).amax(dim=-1)


def judge_layer(errors: Any, deviations: Any) -> dict[str, Any]:
    """One layer's tokens, pooled over the rows checked, each error and deviation in units of its row's bound
    (``tolerance`` x the layer's scale). A token over the bound is excused when it lands within
    ``PRECISION_MARGIN`` x the most the job-dtype reference moves at any token of the layer (the same kind of
    token: a router near-tie flips in one implementation and not another), and the layer still fails when more
    of its tokens are over than ``PRECISION_MARGIN`` x the reference's own share, plus one."""
    over = errors > 1
    worst = deviations.max().item() if deviations.numel() else 0.0
    failing = over & (errors > PRECISION_MARGIN * max(worst, 1.0))
    share = over.float().mean().item()
    own_share = (deviations > 1).float().mean().item() if deviations.numel() else 0.0
    return {"over": over, "failing": failing, "share": share, "own_share": own_share, "worst": worst,
            "too_many": share > PRECISION_MARGIN * own_share + 1 / max(errors.numel(), 1)}


def perturbed(model: Any, ids: Any, dtype: Any, seed: int) -> list[Any]:
    """The job-dtype reference once more, its embeddings moved by half a unit in the last place at random:
    the rounding another implementation of the same dtype may do differently."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    step = torch.finfo(dtype).eps / 2

    def nudge(_module: Any, _inputs: Any, out: Any) -> Any:
        signs = torch.randint(-1, 2, out.shape, generator=generator).to(out.dtype)
        return out * (1 + signs * step)

    hook = model.get_input_embeddings().register_forward_hook(nudge)
    try:
        return reference_states(model, ids)
    finally:
        hook.remove()


def reference_states(model: Any, ids: Any) -> list[Any]:
    import torch

    with torch.no_grad():
        return [s[0] for s in model(ids.unsqueeze(0), output_hidden_states=True).hidden_states]


def sample_indices(count: int, sample: int) -> set[int]:
    if sample <= 0 or sample >= count:
        return set(range(count))
    return {round(i * (count - 1) / max(sample - 1, 1)) for i in range(sample)}


def check(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig

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
    counts: set[int] = set()
    pending: list[tuple[int, Any, list[Any], list[int] | None]] = []  # sequences whose values are checked
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
        pending.append((index, ids, states, layer_ids))
    judged = values_against_reference(args, config, pending)
    problems += judged["problems"]
    passed += judged["passed"]
    off_layers |= judged["off"]
    per_layer = judged["max"]
    if len(counts) > 1 and not given:
        problems.append(f"sequences differ in their number of layers: {sorted(counts)}")
    return {"verified": not problems, "readable": True, "sequences": len(records), "values_checked": len(values),
            "tolerance": args.tolerance, "max_abs_error_per_layer": per_layer, "job_dtype": judged["dtype"],
            "median_error_per_layer": judged["median"], "outliers": judged["outliers"],
            "excused_tokens": judged["excused_tokens"], "problems": problems[:50],
            "passed": passed[:20], "short_sequences": sorted(short), "misshapen_sequences": sorted(misshapen),
            "layer_count_sequences": sorted(layer_count), "off_layers": sorted(off_layers)}


def values_against_reference(args: argparse.Namespace, config: Any,
                             pending: list[tuple[int, Any, list[Any], list[int] | None]]) -> dict[str, Any]:
    """Each pending sequence's tensors, token by token, against HF in fp32 (the layer named, or the one it is
    closest to), judged per layer against HF in the job's dtype."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = job_dtype(config, args.dtype)
    name = str(dtype).removeprefix("torch.")
    out: dict[str, Any] = {"problems": [], "passed": [], "max": {}, "median": {}, "outliers": [], "off": set(),
                           "dtype": name, "excused_tokens": 0}
    if not pending:
        return out
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
    exact = [reference_states(model, ids) for _, ids, _, _ in pending]
    near: list[list[list[Any]]] = [[] for _ in pending]
    over = any(bool((token_errors(t.float(), ref[c + 1], 0.0) > args.tolerance * ref[c + 1].abs().max()).any())
               for (_, _, states, ids_), ref in zip(pending, exact, strict=True) for j, t in enumerate(states)
               for c in ([ids_[j]] if ids_ else []) if c + 1 < len(ref))
    if (over or not all(ids_ for *_, ids_ in pending)) and dtype != torch.float32:
        # the same weights in the job's dtype: how far the reference itself moves there (only asked when a token
        # is over the bound, or the layers are matched by value)
        model = model.to(dtype)
        near = [[reference_states(model, ids), *(perturbed(model, ids, dtype, seed) for seed in range(PERTURBED))]
                for _, ids, _, _ in pending]
    by_layer: dict[int, dict[str, list[Any]]] = {}
    for (index, _, states, layer_ids), reference, near_row in zip(pending, exact, near, strict=True):
        matched: dict[int, list[int]] = {}  # without ids: reference layer -> the slots whose values are nearest it
        for j, tensor in enumerate(states):
            got = tensor.float()
            candidates = [layer_ids[j]] if layer_ids else list(range(len(reference) - 1))
            errors = {c: (got - reference[c + 1]).abs().max().item() for c in candidates if c + 1 < len(reference)}
            if not errors:
                out["problems"].append(f"sequence {index}: layer {candidates[0]} is beyond the model's "
                                       f"{len(reference) - 1}")
                continue
            layer = min(errors, key=lambda c: errors[c])
            matched.setdefault(layer, []).append(j)
            ref = reference[layer + 1].float()
            bound = args.tolerance * max(ref.abs().max().item(), 1e-6)
            seen = by_layer.setdefault(layer, {"errors": [], "deviations": [], "bounds": [], "where": []})
            seen["errors"].append(token_errors(got, ref, 0.0) / bound)  # a 5 % bound covers bf16's
            seen["deviations"] += [(n[layer + 1].float() - ref).abs().amax(dim=-1) / bound for n in near_row]
            seen["bounds"].append(torch.full((len(ref),), bound))
            seen["where"] += [(index, t) for t in range(len(ref))]
        for layer, slots in matched.items():
            if len(slots) > 1 and not layer_ids:  # an extraction saves each layer once
                out["off"].add(layer)
                out["problems"].append(f"sequence {index}: slots {', '.join(map(str, slots))} all hold layer "
                                       f"{layer}'s values (an extraction saves each layer once)")
    for layer, seen in sorted(by_layer.items()):
        e, b, where = torch.cat(seen["errors"]), torch.cat(seen["bounds"]), seen["where"]
        verdict = judge_layer(e, torch.cat(seen["deviations"]) if seen["deviations"] else torch.zeros(0))
        absolute = e * b
        out["max"][layer], out["median"][layer] = absolute.max().item(), absolute.median().item()
        for i in verdict["over"].nonzero().flatten().tolist():
            out["outliers"].append({"sequence": where[i][0], "layer": layer, "token": where[i][1],
                                    "error": round(absolute[i].item(), 6), "bound": round(b[i].item(), 6),
                                    "excused": not bool(verdict["failing"][i])})
        said = (f"median per-token error {out['median'][layer]:.5f}, max {out['max'][layer]:.4f}; "
                f"{int(verdict['over'].sum())} of {len(e)} tokens over {args.tolerance} x the layer's scale"
                + (f"; the {name} reference itself has {verdict['own_share']:.1%} of its tokens over and moves up to "
                   f"{verdict['worst']:.1f} x that bound" if seen["deviations"] else ""))
        failing = verdict["failing"].nonzero().flatten().tolist()
        out["excused_tokens"] += int(verdict["over"].sum()) - len(failing)
        if failing or verdict["too_many"]:
            out["off"].add(layer)
            first = failing[0] if failing else int(verdict["over"].nonzero().flatten()[0])
            out["problems"].append(
                f"sequence {where[first][0]} layer {layer}: max abs error {absolute[first].item():.4f} > "
                f"{args.tolerance} x scale (bound {b[first].item():.4f}), "
                + (f"{len(failing)} token(s) beyond {PRECISION_MARGIN} x the most the {name} reference moves"
                   if failing else f"{verdict['share']:.1%} of tokens over, more than {PRECISION_MARGIN} x the {name} "
                   "reference's own share") + f"; {said}")
        else:
            out["passed"].append(f"layer {layer}: {said}")
    out["outliers"] = sorted(out["outliers"], key=lambda o: (o["excused"], -o["error"]))[:MAX_OUTLIERS]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="medic-check")
    parser.add_argument("output")
    parser.add_argument("--model", required=True)
    parser.add_argument("--layers", default="", help="layer ids, when the output does not hold them")
    parser.add_argument("--tolerance", type=float, default=0.05, help="max abs error / layer scale")
    parser.add_argument("--sample", type=int, default=8, help="check values of N sequences (0 = all)")
    parser.add_argument("--dtype", default="auto", help="the dtype the job computes in (auto: the model's own)")
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
