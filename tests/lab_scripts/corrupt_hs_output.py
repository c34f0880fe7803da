"""Copies of a real hidden-state folder (the speculators client's hs_<row>.safetensors), each wrong in one named way.

python corrupt_hs_output.py SRC DST MODE   (the server lab's python: torch, safetensors, hs_connectors)
MODE faults:  row 0 values perturbed in the first layer slot, row 1 token ids shifted, row 2 one token short,
              row 3 its last layer slot dropped, row 4 deleted; row 5 as written.
MODE fp8:     every file quantized as hs-connectors' FP8HiddenStatesConnector writes it (its own quantize function).
MODE renamed: every file's tensors under names no known writer uses.
"""

import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file


def main() -> int:
    src, dst, mode = sys.argv[1:4]
    shutil.copytree(src, dst)
    names = sorted(n for n in os.listdir(dst) if n.endswith(".safetensors"))
    for name in names:
        path = os.path.join(dst, name)
        data = load_file(path)
        states, tokens = data["hidden_states"], data["token_ids"]
        row = int(name[3:].split(".")[0])
        if mode == "fp8":
            from hs_connectors.fp8_utils import SCALES_KEY, quantize_tensor_to_fp8

            fp8, scales = quantize_tensor_to_fp8(states)
            data = {"hidden_states": fp8, SCALES_KEY: scales, "token_ids": tokens}
        elif mode == "renamed":
            data = {"hs": states, "ids": tokens}
        elif row == 0:
            noisy = states.float().clone()
            noisy[:, 0, :] += 0.5 * noisy[:, 0, :].abs().max() * torch.randn_like(noisy[:, 0, :])
            data["hidden_states"] = noisy.to(states.dtype)
        elif row == 1:
            data["token_ids"] = tokens + 1
        elif row == 2:
            data["hidden_states"] = states[:-1].contiguous()
        elif row == 3:
            data["hidden_states"] = states[:, :-1].contiguous()
        elif row == 4:
            os.remove(path)
            continue
        save_file({k: v.contiguous() for k, v in data.items()}, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
