"""How fast medic reads a job log: ``python -m bench.logs [megabytes]`` from the repository root.

Writes a synthetic vLLM-like log (process- and logger-prefixed INFO lines, speculators' own log lines,
tqdm bars redrawn with \\r, the shard loader's one-line-per-redraw bar, a few tracebacks) to a temporary
directory, then times ``clean_lines`` + ``extract_tracebacks`` over it in this fresh process. The last line
printed is ``key=value`` figures, ``parse_mb_s=<x>`` first, for scripts to read. ``parse_mb_s`` counts
megabytes per CPU-second of the (single-threaded) parse, so other work on a shared machine does not skew
it; the wall-clock figure is printed above it.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.logs import clean_lines, extract_tracebacks, root_cause

DEFAULT_MEGABYTES = 100
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


def bench_parse(megabytes: float = DEFAULT_MEGABYTES) -> float:
    """Parse speed (MB per CPU-second) of clean_lines + extract_tracebacks over a synthetic log; prints
    the figures."""
    with tempfile.TemporaryDirectory(prefix="medic-bench-") as tmp:
        path = Path(tmp) / "job.log"
        redraw_bytes, _ = write_synthetic_log(path, megabytes)
        data = path.read_bytes()
    started, cpu_started = time.perf_counter(), time.process_time()
    lines = clean_lines(data)
    cleaned = time.perf_counter()
    tracebacks = extract_tracebacks(lines)
    finished, cpu_seconds = time.perf_counter(), time.process_time() - cpu_started
    size_mb = len(data) / 1e6
    root = root_cause(tracebacks)
    newlines = data.count(b"\n")
    print(f"log: {size_mb:.1f} MB, {newlines:,} lines, {redraw_bytes / len(data):.0%} of its bytes tqdm redraws")
    print(f"clean_lines: {cleaned - started:.2f} s -> {len(lines):,} lines")
    print(f"extract_tracebacks: {finished - cleaned:.2f} s -> {len(tracebacks)} tracebacks")
    print(f"root cause: {root.proc if root else None} {root.exc_type if root else None}")
    print(f"parse: {finished - started:.2f} s wall = {size_mb / (finished - started):.1f} MB/s")
    print(f"parse: {cpu_seconds:.2f} s CPU = {size_mb / cpu_seconds:.1f} MB/s")
    return size_mb / cpu_seconds


def main() -> None:
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MEGABYTES
    figures = {"parse_mb_s": bench_parse(megabytes)}
    print(" ".join(f"{name}={value:.1f}" for name, value in figures.items()))


if __name__ == "__main__":
    main()
