"""Ranks of a distributed job in one log: their lines interleave, one line of this rank, one of that. Each rank's
prefix (torchrun's ``[rank1]:`` or ``[default1]:``, ``srun --label``'s ``1: ``, vLLM's ``(VllmWorker rank=1
pid=…)``) makes it a process of its own, so the root cause is the rank that failed first on its own, with its own
frames and message, never a splice of two ranks' lines; and a rank that only says "see above" is not it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent.nodes.diagnose import fault_from_log
from tools import logs

LIB = "/env/lib/python3.11/site-packages/speculators/data_generation/vllm_hidden_states_generator.py"
ROOT = [  # rank 1: the real fault, deep in the library
    "Traceback (most recent call last):",
    '  File "/work/driver.py", line 31, in <module>',
    "    main()",
    f'  File "{LIB}", line 212, in _generate',
    "    self.llm.generate(prompts, sampling_params=params, legacy=True)",
    "TypeError: LLM.generate() got an unexpected keyword argument 'legacy'",
]
WRAPPER = [  # rank 0: torn down because rank 1 died; it only points elsewhere
    "Traceback (most recent call last):",
    '  File "/work/driver.py", line 31, in <module>',
    "    main()",
    '  File "/env/lib/python3.11/site-packages/vllm/v1/executor/multiproc_executor.py", line 250, in collective_rpc',
    "    raise RuntimeError(f\"Worker failed with error '{e}', please check the stack trace above for the root \"",
    "RuntimeError: Worker failed with error 'closed', please check the stack trace above for the root cause",
]
RANK_ONE = {"torchrun": "rank1", "torchrun-tee": "default1", "srun-label": "task 1",
            "vllm": "VllmWorker rank=1 pid=4001"}
STYLES: dict[str, Callable[[int, str], str]] = {
    "torchrun": lambda rank, line: f"[rank{rank}]: {line}",
    "torchrun-tee": lambda rank, line: f"[default{rank}]:{line}",
    "srun-label": lambda rank, line: f"{rank:>2}: {line}",
    "vllm": lambda rank, line: f"(VllmWorker rank={rank} pid={4000 + rank}) {line}",
}


def interleaved(style: Callable[[int, str], str]) -> bytes:
    """Rank 0's wrapper starts first, then the two alternate line by line, between ordinary log lines."""
    zero, one = [style(0, line) for line in WRAPPER], [style(1, line) for line in ROOT]
    lines = [style(0, "INFO loading model"), style(1, "INFO loading model"), zero[0]]
    for a, b in zip(zero[1:], one, strict=False):
        lines += [b, a]
    lines += [*one[len(zero) - 1:], style(0, "INFO shutting down"), "srun: error: n1: task 1: Exited with exit code 1"]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("style", list(STYLES))
def test_interleaved_ranks_still_yield_the_root_cause(style: str) -> None:
    fault = fault_from_log(interleaved(STYLES[style]))
    assert fault.exc_type == "TypeError"
    assert fault.message == "LLM.generate() got an unexpected keyword argument 'legacy'"  # no other rank's line
    assert [(f.file, f.line) for f in fault.frames] == [("/work/driver.py", 31), (LIB, 212)]
    assert fault.proc == RANK_ONE[style]


def test_each_rank_is_a_process_of_its_own_and_the_wrapper_is_kept_apart() -> None:
    found = logs.extract_tracebacks(logs.clean_lines(interleaved(STYLES["torchrun"])))
    assert sorted((tb.proc, tb.exc_type) for tb in found) == [("rank0", "RuntimeError"), ("rank1", "TypeError")]
    assert all(len(tb.frames) == 2 for tb in found)


def test_lines_that_only_look_like_a_label_stay_where_they_are() -> None:
    """A traceback's code line that starts with digits and a colon (a dict literal) is not a rank."""
    log = "\n".join(["Traceback (most recent call last):", '  File "/work/driver.py", line 3, in <module>',
                     "    0: 'zero',", "KeyError: 'one'"]) + "\n"
    fault = fault_from_log(log.encode())
    assert fault.exc_type == "KeyError" and fault.proc is None and fault.frames[0].code == "0: 'zero',"
