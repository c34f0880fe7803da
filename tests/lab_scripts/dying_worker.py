"""A job shaped like vLLM's whose worker dies of a signal, not of a Python exception, while the driver then fails
with an error of its own: the CPU analogue of a worker killed by the OOM killer or crashing in native code.

The worker is a spawned process named as vLLM names its workers; what it writes through Python carries vLLM's
``(Worker_TP0 pid=N)`` prefix (vllm.utils.system_utils.decorate_logs wraps sys.stdout/sys.stderr so), while what
the C runtime and faulthandler write to the file descriptors stays unprefixed, as it does under vLLM. The driver
watches the worker's sentinel, logs its end in vLLM's words (v1/utils.py: "Process … (PID: …) died with exit code
…") and raises vLLM's shm_broadcast ``RuntimeError("cancelled")``.

    python dying_worker.py kill     # the worker SIGKILLs itself, as the OOM killer would
    python dying_worker.py segv     # the worker reads address 0 (ctypes.string_at) with faulthandler enabled
    python dying_worker.py driver   # the driver itself is SIGKILLed: only the shell that ran it can say so
"""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import multiprocessing
import os
import signal
import sys
from multiprocessing import connection

logger = logging.getLogger("vllm.v1.utils")


def decorate(name: str) -> None:
    """vLLM's _add_prefix: the prefix before every line that Python writes to stdout and stderr."""
    prefix = f"({name} pid={os.getpid()}) "
    for file in (sys.stdout, sys.stderr):
        state = {"new": True}

        def prefixed(s: str, write=file.write, state=state) -> int:
            if not s:
                return 0
            if state["new"]:
                write(prefix)
            idx = 0
            while (nxt := s.find("\n", idx)) != -1:
                nxt += 1
                write(s[idx:nxt])
                if nxt == len(s):
                    state["new"] = True
                    return len(s)
                write(prefix)
                idx = nxt
            write(s[idx:])
            state["new"] = False
            return len(s)

        file.write = prefixed  # type: ignore[method-assign]


def load_weights(mode: str) -> None:
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    ctypes.string_at(0)


def work(mode: str) -> None:
    decorate("Worker_TP0")
    faulthandler.enable()
    print("loading weights", flush=True)
    load_weights(mode)


def main(mode: str) -> None:
    logging.basicConfig(format="%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s",
                        datefmt="%m-%d %H:%M:%S")
    if mode == "driver":
        print("loading weights", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    worker = multiprocessing.get_context("spawn").Process(target=work, args=(mode,), name="VllmWorker-0")
    worker.start()
    connection.wait([worker.sentinel])
    worker.join()
    logger.error("Process %s (PID: %s) died with exit code %s", worker.name, worker.pid, worker.exitcode)
    raise RuntimeError("cancelled")


if __name__ == "__main__":
    main(sys.argv[1])
