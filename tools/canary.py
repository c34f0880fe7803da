"""The canary: a tiny random-weight model of the TARGET's architecture, built on the host from its config.json.

The same driver runs on it first; each fault it shows costs seconds, not a big-model load. The script runs in
the target env (it needs torch and transformers there, as the job does) and keeps what the driver depends on:
the architecture class, the layer count (layer ids stay valid, capped at MAX_LAYERS), the vocabulary and the
tokenizer files; it shrinks widths to a head_dim every attention backend supports.
"""

from __future__ import annotations

import re
import shlex

from tools.errors import RunError
from tools.host import Host
from tools.model_folder import ModelFolder
from tools.validate_output import output_words

MAX_LAYERS = 32
SCRIPT = r"""
import json, os, shutil, sys
src, out, max_layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
import torch
from transformers import AutoConfig, AutoModelForCausalLM
config = AutoConfig.from_pretrained(src)
text = getattr(config, "text_config", config)
heads = 2
text.hidden_size = 64 * heads              # head_dim 64: supported by the CPU and GPU attention backends
text.num_attention_heads = heads
if hasattr(text, "num_key_value_heads"):
    text.num_key_value_heads = min(heads, text.num_key_value_heads or heads)
if hasattr(text, "head_dim"):
    text.head_dim = 64
text.intermediate_size = 256
text.num_hidden_layers = min(text.num_hidden_layers, max_layers)
tmp = out + ".tmp"
shutil.rmtree(tmp, ignore_errors=True)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
model.save_pretrained(tmp, safe_serialization=True)
for name in os.listdir(src):
    if name.startswith(("tokenizer", "special_tokens", "vocab", "merges")) or name.endswith(".model"):
        shutil.copy(os.path.join(src, name), tmp)
json.dump({"canary_of": src}, open(os.path.join(tmp, "medic-canary.json"), "w"))
shutil.rmtree(out, ignore_errors=True)
os.rename(tmp, out)
print(json.dumps({"layers": text.num_hidden_layers, "hidden": text.hidden_size}))
"""


def build_canary(host: Host, python: str, model_dir: str, out_dir: str, *, timeout: float = 900.0) -> str:
    """Build (or reuse) the canary of ``model_dir`` at ``out_dir`` on ``host``; returns ``out_dir``."""
    if host.exists(f"{out_dir}/medic-canary.json"):
        return out_dir
    result = host.run([python, "-c", SCRIPT, model_dir, out_dir, str(MAX_LAYERS)], timeout=timeout,
                      env={"TOKENIZERS_PARALLELISM": "false"})
    if not result.ok:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RunError(f"could not build a canary of {model_dir}: {last[:200]} "
                       f"(run without --canary-model to skip it): {shlex.quote(python)}")
    return out_dir


def swap_model(command: list[str], model_dir: str, canary_dir: str) -> list[str]:
    """The same command, pointed at the canary: every argument that names the model dir as a path — the whole
    argument, an ``--opt=DIR`` value, a list item or a path under it. A relative name (``model``) is also a word
    inside option names (``--model``), so a bare substring never counts."""
    folder = model_dir.rstrip("/") or model_dir
    path = re.compile(r"(?:^|(?<=[=,:]))" + re.escape(folder) + r"(?=$|[/,:])")
    return [path.sub(lambda _: canary_dir, arg) for arg in command]


def canary_job(command: list[str], folder: ModelFolder, canary_dir: str) -> tuple[list[str], dict[str, str]]:
    """(command, env over the job's) of the canary: the model folder swapped where the job names it — a word of
    the command, a driver option's default (the option given, pointing at the canary), or a variable of its env."""
    if folder.via == "default":
        return [*command, folder.key, canary_dir], {}
    if folder.via == "env":
        return list(command), {folder.key: canary_dir}
    return swap_model(command, folder.named, canary_dir), {}


def outputs_apart(command: list[str], validate: list[str] | None, folder: str
                  ) -> tuple[list[str], list[str] | None, dict[str, str]] | None:
    """The canary's command and validator writing and reading its output under ``folder``, never where the job
    writes its own (a canary run beside the target must not overwrite it, nor be judged by its file), and the
    words moved. None where that cannot be shown: the command names no output, or a validator is given that
    does not name each output word as the command does (it would read the job's file)."""
    moved = {word: f"{folder}/{word.rstrip('/').rsplit('/', 1)[-1]}" for word in output_words(command)}
    if not moved or (validate is not None and not all(_names(validate, word) for word in moved)):
        return None
    return _moved(command, moved), (_moved(validate, moved) if validate is not None else None), moved


def _names(command: list[str], word: str) -> bool:
    return any(arg == word or arg.endswith(f"={word}") for arg in command)


def _moved(command: list[str], moved: dict[str, str]) -> list[str]:
    out = []
    for arg in command:
        option, eq, value = arg.partition("=")
        out.append(moved.get(arg) or (f"{option}={moved[value]}" if eq and value in moved else arg))
    return out
