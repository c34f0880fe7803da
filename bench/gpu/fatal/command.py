"""Print the one device command that records tests/data/logs/gpu_*.log on a GPU machine.

The device tool sends the lead's checkout, not this one, and takes a command of at most 2,000 characters: so
record.py travels inside the command, its docstrings and annotations dropped (ast.unparse, which is why the logs'
frames read ``/tmp/record.py`` with other line numbers), xz-compressed and base64-encoded.

    python bench/gpu/fatal/command.py    # then give its output to the device tool's ``run``
"""

from __future__ import annotations

import ast
import base64
import lzma
from pathlib import Path

MODES = ("assert", "illegal", "nccl")  # -> gpu_device_assert.log, gpu_illegal_address.log, gpu_nccl_duplicate_gpu.log
NO_MULTICAST = "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
LIMIT = 2000


def stripped(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
        if isinstance(node, ast.FunctionDef):
            node.returns = None
            for arg in node.args.args:
                arg.annotation = None
    return ast.unparse(tree) + "\n"


def command() -> str:
    script = stripped((Path(__file__).parent / "record.py").read_text())
    packed = base64.b64encode(lzma.compress(script.encode(), preset=9 | lzma.PRESET_EXTREME)).decode()
    runs = "; ".join(f"timeout 60 python3 record.py {m} > $OUT/gpu_{m}.log 2>&1; echo {m} rc=$? >> $OUT/rcs.txt"
                     for m in MODES)
    line = (f"cd /tmp && echo {packed} | base64 -d | xz -d > record.py && export {NO_MULTICAST}; {runs}; "
            "python3 -c 'import torch;print(torch.__version__,torch.version.cuda,torch.cuda.nccl.version(),"
            "torch.cuda.get_device_name())' >> $OUT/rcs.txt; cat $OUT/rcs.txt")
    if len(line) > LIMIT:
        raise SystemExit(f"the command is {len(line)} characters, over the device tool's {LIMIT}")
    return line


if __name__ == "__main__":
    print(command())
