"""medic's own check of a hidden-state server job's output. Runs in the TARGET env, sent on stdin:

    python - OUTPUT --model DIR --dataset DIR --layers 2,4,5,8 --layouts JSON [--max-samples N] [--world-size W
             --rank R] [--sample 8] [--json]

OUTPUT is the folder the speculators client (≥ 0.5) fills with one ``hs_<row>.safetensors`` per dataset row;
``--layouts`` the records medic knows (tools/hs_layouts.py); the client's own ``--max-samples``, ``--world-size`` and
``--rank`` say which rows it was asked for (its get_indices_to_process: rank R's contiguous chunk of the first N).
Checked: every row's file is there, its token ids are the dataset's ``input_ids``, its states are
``[tokens, len(layers), hidden]`` and finite; a sample spread over the rows against HF transformers in fp32,
where layer id L is HF's ``hidden_states[L]`` (the input of decoder layer L) and id ``num_hidden_layers`` the last
layer's output before the final norm. Each token is judged apart: its largest element error may be ``tolerance`` x
its layer's scale, plus the stored dtype's own rounding (``finfo(dtype).eps`` x the value: an fp8 record keeps 3
mantissa bits). Where the job computes in a lower precision (``--dtype``, default the model's own), HF computes in
that dtype too (plainly, and with its embeddings nudged by half a unit in the last place): a near-tie in a
mixture-of-experts router sends a few tokens to another expert under bf16, in HF as in vLLM, though not the same
tokens. A token over the bound is then right to the model's precision when it is within ``PRECISION_MARGIN`` x the
most those references move at that layer, as long as no more of the layer's tokens are over than
``PRECISION_MARGIN`` x their share (judge_layer). The report gives each layer's median per-token error and the
outlier tokens, excused or not.

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


# how far past the job-dtype reference's own deviation from fp32 a token may land: two implementations in one
# dtype round differently, so where HF's bf16 forward moves by d, another bf16 forward moves by about as much
PRECISION_MARGIN = 2.0
MAX_OUTLIERS = 20  # outlier tokens listed in the report
PERTURBED = 2  # job-dtype references with nudged embeddings, beside the plain one


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
    pending: list[tuple[int, Any, Any, Any]] = []  # rows whose values are checked: (row, ids, states, stored dtype)
    values = {wanted[i] for i in sample_indices(len(wanted), args.sample)}
    used: set[str] = set()
    missing: list[int] = []  # rows with no record: the job's own log may say why (agent/job_words.py)
    for row in wanted:
        name = args.file_name.format(index=row)
        path = os.path.join(args.output, name)
        if not os.path.exists(path):
            problems.append(f"row {row}: no {name}")
            missing.append(row)
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
        if row in values:
            pending.append((row, ids, got, stored))
    judged = values_against_reference(args, config, layer_ids, pending)
    problems += judged["problems"]
    passed += judged["passed"]
    per_layer = judged["max"]
    return {"verified": not problems, "readable": True, "sequences": len(wanted), "values_checked": len(values),
            "layouts": sorted(used), "layer_ids": layer_ids, "tolerance": args.tolerance,
            "max_abs_error_per_layer": per_layer, "median_error_per_layer": judged["median"],
            "job_dtype": judged["dtype"], "outliers": judged["outliers"],
            "excused_tokens": judged["excused_tokens"], "problems": problems[:50],
            "passed": passed[:20], "missing_sequences": missing, "off_layers": sorted(judged["off"])}


def values_against_reference(args: argparse.Namespace, config: Any, layer_ids: list[int],
                             pending: list[tuple[int, Any, Any, Any]]) -> dict[str, Any]:
    """The pending rows' states, token by token, against HF in fp32, judged against HF in the job's dtype."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = job_dtype(config, args.dtype)
    name = str(dtype).removeprefix("torch.")
    out: dict[str, Any] = {"problems": [], "passed": [], "max": {}, "median": {}, "outliers": [], "dtype": name,
                           "excused_tokens": 0, "off": set()}
    if not pending:
        return out
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    exact = [reference_states(model, ids) for _, ids, _, _ in pending]
    near: list[list[list[Any]]] = [[] for _ in pending]
    over = any(bool((token_errors(got[:, slot, :], ref_row[layer].float(), 0.0)
                     > args.tolerance * ref_row[layer].abs().max()).any())
               for (_, _, got, _), ref_row in zip(pending, exact, strict=True) for slot, layer in enumerate(layer_ids))
    if over and dtype != torch.float32:  # the same weights in the job's dtype: how far the reference itself moves
        model = model.to(dtype)
        near = [[reference_states(model, ids), *(perturbed(model, ids, dtype, seed) for seed in range(PERTURBED))]
                for _, ids, _, _ in pending]
    for slot, layer in enumerate(layer_ids):
        errors, deviations, bounds, where = [], [], [], []
        for (row, _, got, stored), ref_row, near_row in zip(pending, exact, near, strict=True):
            ref = ref_row[layer].float()
            bound = args.tolerance * max(ref.abs().max().item(), 1e-6)
            rounding = torch.finfo(stored).eps if stored.is_floating_point else 0.0
            errors.append(token_errors(got[:, slot, :], ref, rounding) / bound)
            deviations += [(n[layer].float() - ref).abs().amax(dim=-1) / bound for n in near_row]
            bounds.append(torch.full((len(ref),), bound))
            where += [(row, t) for t in range(len(ref))]
        e, b = torch.cat(errors), torch.cat(bounds)
        j = judge_layer(e, torch.cat(deviations) if deviations else torch.zeros(0))
        absolute = e * b
        out["max"][layer] = absolute.max().item()
        out["median"][layer] = absolute.median().item()
        for i in j["over"].nonzero().flatten().tolist():
            out["outliers"].append({"row": where[i][0], "layer": layer, "token": where[i][1],
                                    "error": round(absolute[i].item(), 6), "bound": round(b[i].item(), 6),
                                    "excused": not bool(j["failing"][i])})
        said = (f"median per-token error {out['median'][layer]:.5f}, max {out['max'][layer]:.4f}; "
                f"{int(j['over'].sum())} of {len(e)} tokens over {args.tolerance} x the layer's scale"
                + (f"; the {name} reference itself has {j['own_share']:.1%} of its tokens over and moves up to "
                   f"{j['worst']:.1f} x that bound" if deviations else ""))
        failing = j["failing"].nonzero().flatten().tolist()
        out["excused_tokens"] += int(j["over"].sum()) - len(failing)
        if failing or j["too_many"]:
            out["off"].add(layer)
            first = failing[0] if failing else int(j["over"].nonzero().flatten()[0])
            out["problems"].append(
                f"row {where[first][0]} layer {layer}: max abs error {absolute[first].item():.4f} > "
                f"{args.tolerance} x scale (bound {b[first].item():.4f}) at token {where[first][1]}, "
                + (f"{len(failing)} token(s) beyond {PRECISION_MARGIN} x the most the {name} reference moves"
                   if failing else f"{j['share']:.1%} of tokens over, more than {PRECISION_MARGIN} x the {name} "
                   "reference's own share") + f"; {said}")
        else:
            out["passed"].append(f"layer {layer}: {said}")
    out["outliers"] = sorted(out["outliers"], key=lambda o: (o["excused"], -o["error"]))[:MAX_OUTLIERS]
    return out


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
    parser.add_argument("--dtype", default="auto", help="the dtype the job computes in (the server's --dtype; "
                        "auto: the model's own)")
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
