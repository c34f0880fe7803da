"""A random-weight Llama of a real size, made on the GPU host (no network there) from the lab's tiny model: its
tokenizer and vocabulary, the shape of a released model. Runs in the target env on the device:

    python big_model.py TINY_DIR OUT_DIR 8b|14b

Weights are drawn on the GPU (seconds) and saved as bf16 safetensors shards; the job then loads them as it would
a downloaded checkpoint. Token ids stay below the vocabulary the tokenizer has (a larger one is never used).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

# Llama-3-8B's and a 14B-class shape (Qwen2.5-14B's widths on Llama's layout); vocab is the tokenizer's
SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8),
    "14b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=48, num_attention_heads=40,
                num_key_value_heads=8),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def main(tiny: str, out: str, shape: str) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    started = time.monotonic()
    config = LlamaConfig.from_pretrained(tiny)
    for key, value in SHAPES[shape].items():
        setattr(config, key, value)
    config.head_dim = config.hidden_size // config.num_attention_heads
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    Path(out).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size="5GB", safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(tiny) / name).exists():
            shutil.copy(Path(tiny) / name, Path(out) / name)
    (Path(out) / "medic-model.json").write_text(json.dumps({"size": shape, **SHAPES[shape],
                                                            "vocab_size": config.vocab_size}))
    size = sum(f.stat().st_size for f in Path(out).glob("*.safetensors"))
    print(f"big model {shape}: {params / 1e9:.2f}B parameters, {size / 2**30:.1f} GiB of bf16 in {out}, "
          f"made in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in SHAPES:
        sys.exit(f"usage: big_model.py TINY_DIR OUT_DIR {'|'.join(SHAPES)}")
    sys.exit(main(*sys.argv[1:]))
