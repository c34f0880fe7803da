"""Record real logs of a worker dying of a CUDA or NCCL fault on a GPU, for tests/data/logs/gpu_*.log.

Each mode is a job like vLLM's: a spawned worker (CUDA forces spawn) whose Python output carries vLLM's
``(Name pid=N) `` prefix (the way vllm.utils.system_utils.decorate_logs adds it, on sys.stdout/sys.stderr only:
what CUDA or NCCL write themselves to the file descriptors stays unprefixed), and a parent that then fails with
a secondary error of its own, as vLLM's driver raises ``RuntimeError("cancelled")`` once its worker is gone.

    python record.py assert|illegal|nccl >LOG 2>&1
"""

import multiprocessing as mp
import os
import sys


def decorate(name: str) -> None:
    """vLLM's _add_prefix: the prefix before every line of what Python writes (not what C code writes)."""
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


def assert_worker() -> None:
    decorate("Worker_TP0")
    import torch

    emb = torch.nn.Embedding(128, 16).cuda()
    ids = torch.tensor([[1, 2, 128 + 7]], device="cuda")  # one token id past the vocabulary
    print("embedding token ids", ids.tolist(), flush=True)
    print(emb(ids).sum().item())


def illegal_worker() -> None:
    decorate("Worker_TP0")
    import torch

    small = torch.zeros(1, device="cuda")

    class Wider:  # the same allocation described as 4 GiB: the kernel writes past what was allocated
        __cuda_array_interface__ = {"shape": (1 << 30,), "typestr": "<f4",  # noqa: RUF012
                                    "data": (small.data_ptr(), False), "version": 2}

    print("filling", flush=True)
    torch.as_tensor(Wider(), device="cuda").fill_(1)
    torch.cuda.synchronize()


def nccl_rank(rank: int, world: int) -> None:
    decorate(f"Worker_TP{rank}")
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    torch.cuda.set_device(0)  # every rank on the one GPU: NCCL refuses a duplicate device
    dist.init_process_group("nccl", rank=rank, world_size=world)
    tensor = torch.ones(4, device="cuda")
    dist.all_reduce(tensor)
    torch.cuda.synchronize()


def main(mode: str) -> None:
    if mode == "nccl":
        import torch.multiprocessing

        torch.multiprocessing.spawn(nccl_rank, args=(2,), nprocs=2)  # torch's launcher names the failed rank
        return
    worker = mp.get_context("spawn").Process(target={"assert": assert_worker, "illegal": illegal_worker}[mode])
    worker.start()
    worker.join()
    if worker.exitcode != 0:
        raise RuntimeError("cancelled")  # the driver's own later error, as vLLM's shm_broadcast raises it


if __name__ == "__main__":
    main(sys.argv[1])
