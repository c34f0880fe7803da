"""Verify the server lab's output: one hs_<i>.safetensors per dataset row, against an fp32 HF forward pass.

python check_server.py OUTPUT_DIR --model DIR --dataset DIR --layers 2,4,5,8 [--tolerance 0.05] [--json]

Each file holds ``token_ids [T]`` and ``hidden_states [T, n_layers, hidden]`` (what vLLM's
ExampleHiddenStatesConnector writes). In this API a layer id L is the INPUT of decoder layer L, i.e. HF's
``output_hidden_states[L]``; an id equal to num_hidden_layers is the last layer's output before the final norm
(HF's last entry has the norm applied, so it is taken with a hook instead). The tolerance is relative to each
layer's scale, as in the first lab's checker; a token over it is judged against the model's own precision, as
medic's check judges it (tools/hs_output_check.py, whose judging functions this file copies): within 2 x the most
HF's forward in the model's dtype moves at that layer, while no more of the layer's tokens are over than twice
that reference's share (a mixture-of-experts router's near-ties send a few tokens to another expert under bf16).
Exit 0 only when every row is there and right; 1 when the output
is wrong or missing rows; 2 when it cannot be read.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PRECISION_MARGIN = 2.0
PERTURBED = 2


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


def judge_pooled(rows: list[tuple[int, Any, Any, list[Any]]], tolerance: float) -> dict[str, Any]:
    """One layer over the rows checked, each row ``(its index, its tokens' states, the fp32 reference, the
    model-dtype references)``: the layer's largest absolute error, and the first token that fails it (``None``
    when none does) with its row, its absolute error, its row's bound and how many tokens were over."""
    import torch

    errors, deviations, bounds, where = [], [], [], []
    for index, got, ref, near in rows:
        bound = tolerance * max(ref.abs().max().item(), 1e-6)
        errors.append(token_errors(got, ref, 0.0) / bound)
        deviations += [(n.float() - ref).abs().amax(dim=-1) / bound for n in near]
        bounds.append(torch.full((len(ref),), bound))
        where += [index] * len(ref)
    e, b = torch.cat(errors), torch.cat(bounds)
    judged = judge_layer(e, torch.cat(deviations) if deviations else torch.zeros(0))
    absolute = e * b
    failing = judged["failing"].nonzero().flatten().tolist()
    first = None
    if failing or judged["too_many"]:
        at = failing[0] if failing else int(judged["over"].nonzero().flatten()[0])
        first = {"row": where[at], "error": absolute[at].item(), "bound": b[at].item(),
                 "over": int(judged["over"].sum()), "tokens": len(e)}
    return {"max": absolute.max().item(), "first": first}


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
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(args.output)
    if not out.is_dir():
        print(f"check: no output folder at {out}", file=sys.stderr)
        return 2
    layers = [int(x) for x in args.layers.split(",") if x.strip()]
    rows = load_from_disk(args.dataset)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    hidden = model.config.hidden_size
    problems: list[str] = []
    per_layer: dict[int, float] = {}
    pending: list[tuple[int, Any, Any]] = []
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
        pending.append((index, ids, states.float()))
    exact = [reference_states(model, ids) for _, ids, _ in pending]
    dtype = job_dtype(AutoConfig.from_pretrained(args.model), "auto")  # the loaded model's config now says fp32
    near: list[list[Any]] = [[] for _ in pending]
    over = any(bool((token_errors(got[:, k, :], ref_row[layer].float(), 0.0)
                     > args.tolerance * ref_row[layer].abs().max()).any())
               for (_, _, got), ref_row in zip(pending, exact, strict=True) for k, layer in enumerate(layers))
    if over and dtype != torch.float32:  # how far HF's own forward in the model's dtype moves, where it matters
        model = model.to(dtype)
        near = [[reference_states(model, ids), *(perturbed(model, ids, dtype, seed) for seed in range(PERTURBED))]
                for _, ids, _ in pending]
    for k, layer in enumerate(layers):
        if not pending:
            continue
        pooled = judge_pooled([(index, got[:, k, :], ref_row[layer].float(), [n[layer] for n in near_row])
                               for (index, _, got), ref_row, near_row in zip(pending, exact, near, strict=True)],
                              args.tolerance)
        per_layer[layer] = pooled["max"]
        if (first := pooled["first"]) is not None:
            problems.append(f"row {first['row']} layer {layer}: max abs error {first['error']:.4f} > "
                            f"{args.tolerance} x scale ({first['bound']:.4f}), beyond the "
                            f"{str(dtype).removeprefix('torch.')} forward's own precision "
                            f"({first['over']} of {first['tokens']} tokens over)")
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
