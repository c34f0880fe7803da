"""The synthetic vLLM-like log bench/logs.py times medic's reading on: process- and logger-prefixed INFO lines,
speculators' own log lines, tqdm bars redrawn with \\r, now and then a handled traceback, and the fatal one at the
end."""

from __future__ import annotations

import random
from pathlib import Path

_SITE = "/opt/venv/lib/python3.11/site-packages"
_PROCS = ("EngineCore_DP0 pid=4711", "Worker_TP0 pid=4712", "Worker_TP1 pid=4713")


def _worker_traceback(proc: str, when: str, level: str = "ERROR") -> str:
    tag = f"({proc}) {level} {when} [multiproc_executor.py:863] "
    body = [
        "WorkerProc hit an exception.",
        "Traceback (most recent call last):",
        f'  File "{_SITE}/vllm/v1/executor/multiproc_executor.py", line 858, in worker_busy_loop',
        "    output = func(*args, **kwargs)",
        "             ^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{_SITE}/speculators/data_generation/custom_worker.py", line 30, in _patched_forward',
        "    else self.get_input_embeddings(input_ids)",
        f'  File "{_SITE}/torch/nn/modules/module.py", line 1965, in __getattr__',
        "    raise AttributeError(",
        "AttributeError: 'LlamaModel' object has no attribute 'get_input_embeddings'",
        "",
    ]
    return "".join(tag + line + "\r\n" for line in body[:-1]) + tag + "\n"


_DRIVER_TRACEBACK = f"""Traceback (most recent call last):
  File "/work/job/extract.py", line 50, in <module>
    main()
  File "{_SITE}/vllm/v1/executor/multiproc_executor.py", line 358, in get_response
    raise RuntimeError(
RuntimeError: Worker failed with error 'boom', please check the stack trace above for the root cause
"""


def write_synthetic_log(path: Path, megabytes: float) -> tuple[int, int]:
    """A vLLM-like log of about ``megabytes`` MB; returns (bytes in tqdm redraws, bytes in log lines)."""
    rng = random.Random(7)
    target = int(megabytes * 1_000_000)
    redraw_bytes = line_bytes = 0
    batch = 0
    with path.open("w", encoding="utf-8", newline="") as out:
        while redraw_bytes + line_bytes < target:
            batch += 1
            when = f"12-02 {10 + batch // 36000 % 14:02d}:{batch // 600 % 60:02d}:{batch // 10 % 60:02d}"
            lines = []
            for _ in range(14):
                proc = rng.choice(_PROCS)
                lines.append(
                    f"({proc}) INFO {when} [loggers.py:{rng.randint(100, 260)}] Engine 000: Avg prompt "
                    f"throughput: {rng.uniform(100, 900):.1f} tokens/s, Running: {rng.randint(1, 64)} reqs, "
                    f"GPU KV cache usage: {rng.uniform(0, 90):.1f}%, Prefix cache hit rate: 0.0%\n"
                )
            lines.append(
                f"[2026-12-02 10:15:01] INFO logging_utils.py:49:   Extracted batch {batch} "
                f"(32 sequences) -> /data/hidden_states/shard_{batch:06d}.pt\n"
            )
            lines.append(f"INFO {when} [llm.py:400] Added {batch * 32} requests\n")
            text = "".join(lines)
            out.write(text)
            line_bytes += len(text)
            bar = "".join(
                f"\rProcessed prompts: {step * 100 // 32:3d}%|{'█' * (step * 10 // 32):<10}| {step}/32 "
                f"[00:{step:02d}<00:{32 - step:02d}, {rng.uniform(1, 9):.2f}it/s, est. speed input: "
                f"{rng.uniform(500, 900):.2f} toks/s]"
                for step in range(0, 33, 2)
            )
            out.write(bar + "\n")
            redraw_bytes += len(bar.encode()) + 1
            if batch % 2000 == 0:  # now and then a handled traceback, logged as a warning
                text = _worker_traceback(_PROCS[1], when, level="WARNING")
                out.write(text)
                line_bytes += len(text)
        text = _worker_traceback(_PROCS[2], "12-02 23:59:59") + _DRIVER_TRACEBACK
        out.write(text)
        line_bytes += len(text)
    return redraw_bytes, line_bytes
