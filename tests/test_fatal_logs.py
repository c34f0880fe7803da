"""A process that died of something that is not a Python exception — a CUDA or NCCL error, a signal — is the root
cause: the fault names its FIRST fatal line and the process that died, never the driver's later "cancelled" or a
wrapper's "see above", and no code patch is proposed for it.

The GPU logs were recorded on an H200 (tests/data/logs/README.md); the CPU analogues run for real here
(tests/lab_scripts/dying_worker.py: a spawned worker SIGKILLed or segfaulting, its driver failing afterwards), one of
them through a whole medic session. The patterns are held to the words the installed libraries print.
"""

from __future__ import annotations

import json
import mmap
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.faults import fault_from_log
from agent.session import run_session
from lab.build import LabPaths
from tests.fixtures_fake import build_fake
from tests.fixtures_lab import LAB_SCRIPTS
from tools import fatal, logs

LOGS = Path(__file__).parent / "data" / "logs"
DYING = LAB_SCRIPTS / "dying_worker.py"


# ---- logs recorded on the H200 ------------------------------------------------------------------------------
# log -> (kind, the first fatal line starts with, the process that died, a line the report must also hold)
RECORDED = {
    "gpu_device_assert.log": ("CUDA error", "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:", "Worker_TP0 pid=",
                              "torch.AcceleratorError: CUDA error: device-side assert triggered"),
    "gpu_illegal_address.log": ("CUDA error", "torch.AcceleratorError: CUDA error: an illegal memory access",
                                "Worker_TP0 pid=", "cudaErrorIllegalAddress"),
    "gpu_nccl_duplicate_gpu.log": ("NCCL error", "torch.distributed.DistBackendError: NCCL error in: ", "process 1",
                                   "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device"),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_recorded_gpu_death_names_its_first_fatal_line_and_process(name: str) -> None:
    kind, first, proc, also = RECORDED[name]
    data = (LOGS / name).read_bytes()
    fault = fault_from_log(data)
    assert fault.fatal and fault.exc_type == kind
    assert fault.message.splitlines()[0].startswith(first)
    assert also in fault.message
    assert fault.proc is not None and fault.proc.startswith(proc)
    # the parent's later error is not it: vLLM's "cancelled", torch's ProcessRaisedException
    assert "cancelled" not in fault.summary and "ProcessRaisedException" not in fault.summary


def test_the_device_assert_is_the_kernels_line_not_the_later_exception() -> None:
    lines = logs.clean_lines((LOGS / "gpu_device_assert.log").read_bytes())
    found = fatal.first_fatal(lines)
    assert found is not None and "Assertion `srcIndex < srcSelectDimSize` failed." in found.line
    assert found.lineno == next(line.lineno for line in lines if "Assertion `" in line.text)
    assert sum("Assertion `" in detail for detail in found.detail) == 0  # the kernel's other threads: once is enough


# ---- formats that torch, the kernel and shells print, in a job's log ----------------------------------------
def job_log(*worker: str, between: tuple[str, ...] = (), driver: str = "RuntimeError: cancelled") -> bytes:
    """A vLLM job's log: the worker logs ``worker`` (a traceback's exception line) through vLLM's logger, then
    come ``between`` and the driver's own traceback."""
    head = "(Worker_TP0 pid=41) ERROR 12-04 10:00:01 [multiproc_executor.py:863] "
    tb = ("Traceback (most recent call last):", '  File "/env/site-packages/vllm/model.py", line 3, in forward')
    body = [head + line for line in (*tb, *worker)] if worker else []
    return "\n".join(["(Worker_TP0 pid=41) INFO 12-04 10:00:00 [gpu_worker.py:1] loading", *body, *between,
                      "Traceback (most recent call last):", '  File "/work/extract.py", line 9, in <module>',
                      "    main()", driver]).encode() + b"\n"


def test_a_cublas_failure_is_a_cuda_error_of_the_worker() -> None:
    # TORCH_CUDABLAS_CHECK: "CUDA error: ", the status name, " when calling `" #EXPR "`"
    line = "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(handle, opa, ...)`"
    fault = fault_from_log(job_log(line))
    assert (fault.exc_type, fault.proc, fault.fatal) == ("CUDA error", "Worker_TP0 pid=41", True)
    assert fault.message == line


def test_a_python_error_before_a_later_nccl_timeout_stays_the_root_cause() -> None:
    """The rank that raised first is the cause; the others' watchdog timeouts are what its death left behind."""
    data = job_log("TypeError: forward() got an unexpected keyword argument 'legacy'") + (
        b"[rank1]:[E1204 10:00:09 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: "
        b"WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n")
    fault = fault_from_log(data)
    assert (fault.exc_type, fault.fatal) == ("TypeError", False)


def test_a_warning_that_names_a_cuda_error_is_not_a_death() -> None:
    data = job_log("ValueError: bad shape") + b"[W1204 10:00:02 driver_api.cpp:40] Warning: CUDA driver error: busy\n"
    assert fault_from_log(data).exc_type == "ValueError"


@pytest.mark.parametrize(("text", "kind", "proc"), [
    ("Killed", "signal 9 (SIGKILL)", None),  # dash, for the job's own command
    ("/work/run.sh: line 3: 40213 Killed                  python extract.py", "signal 9 (SIGKILL)", "pid 40213"),
    ("Segmentation fault (core dumped)", "signal 11 (SIGSEGV)", None),
    ("[12345.678] Out of memory: Killed process 4242 (python)", "signal 9 (SIGKILL)", "python pid 4242"),
    ("  traceback : Signal 9 (SIGKILL) received by PID 4242", "signal 9 (SIGKILL)", "pid 4242"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV",
     "signal 11 (SIGSEGV)", "process 1"),
    ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
     "{'EngineCore_DP0': -9}", "signal 9 (SIGKILL)", "EngineCore_DP0"),
    ("ERROR 12-04 10:00:03 [multiproc_executor.py:248] Worker proc VllmWorker-1 died unexpectedly, shutting down "
     "executor.", "process died", "VllmWorker-1"),
])
def test_how_a_death_is_reported_names_its_signal_and_process(text: str, kind: str, proc: str | None) -> None:
    data = job_log(between=(text,), driver="vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
                                           "issue. See stack trace (above) for the root cause.")
    fault = fault_from_log(data)
    assert (fault.exc_type, fault.proc, fault.fatal) == (kind, proc, True)
    assert fault.message.splitlines()[0].endswith(text.split("] ", 1)[-1].strip())


def test_a_process_ended_by_its_parent_is_no_root_cause() -> None:
    """SIGTERM is how a parent ends its other workers after one died: the driver's traceback stays the cause."""
    data = job_log(between=("W1204 spawn.py:165] Terminating process 505 via signal SIGTERM",),
                   driver="torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal "
                          "SIGTERM")
    assert not fault_from_log(data).fatal


# ---- the CPU analogues, for real -----------------------------------------------------------------------------
def run_dying(mode: str, tmp: Path) -> bytes:
    """The job as a launch runs it: through /bin/sh, stdout and stderr into one log."""
    log = tmp / f"{mode}.log"
    with log.open("wb") as out:
        subprocess.run(["/bin/sh", "-c", f"python3 {DYING} {mode}"], stdout=out, stderr=subprocess.STDOUT,
                       timeout=120, check=False)
    return log.read_bytes()


@pytest.mark.parametrize(("mode", "kind", "first", "proc"), [
    ("kill", "signal 9 (SIGKILL)", "Process VllmWorker-0 (PID: ", "VllmWorker-0 pid "),
    ("driver", "signal 9 (SIGKILL)", "Killed", None),
])
def test_a_killed_process_is_named_from_the_real_log(mode: str, kind: str, first: str, proc: str | None,
                                                     tmp_path: Path) -> None:
    data = run_dying(mode, tmp_path)
    fault = fault_from_log(data)
    assert fault.fatal and fault.exc_type == kind and fault.message.startswith(first)
    assert fault.proc == proc if proc is None else (fault.proc or "").startswith(proc)
    if mode == "kill":  # without this module the driver's own later error was the root cause
        assert b"RuntimeError: cancelled" in data and "cancelled" not in fault.message


@pytest.fixture(scope="module")
def segv_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict, list[dict]]]:
    """One real medic session on a job whose worker segfaults (faulthandler on) and whose driver then raises."""
    root = tmp_path_factory.mktemp("segv")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDIC_HOME", str(root / "home"))
        fake = build_fake(root / "fake", mode="unattended")
        target = fake.config.target.model_copy(update={"command": [str(fake.python), str(DYING), "segv"]})
        config = fake.config.model_copy(update={"target": target})
        outcome, values = run_session(config)
        yield outcome, values, fake.trace


def test_a_segfaulting_worker_ends_the_session_with_its_first_fatal_line(segv_session) -> None:
    outcome, values, trace = segv_session
    assert outcome == "no_repair"
    fault = values["faults"][0]
    assert fault["fatal"] and fault["exc_type"] == "signal 11 (SIGSEGV)"
    assert fault["message"].startswith("Fatal Python error: Segmentation fault")
    assert fault["proc"].startswith("VllmWorker-0 pid ")  # named by the driver's notice: faulthandler names none
    assert [frame["func"] for frame in fault["frames"][-2:]] == ["load_weights", "string_at"]  # faulthandler's stack
    assert "Fatal Python error: Segmentation fault" in values["outcome_detail"]
    assert "not of a Python exception" in values["outcome_detail"]
    assert not [e for e in trace if e["kind"] in ("candidate", "applied")]  # no patch proposed, none applied
    assert values.get("patches") in (None, [])


# ---- the patterns are the libraries' own words ----------------------------------------------------------------
SAID = [*(said for _, _, said in fatal.LIBRARY_ERRORS), *(notice.said for notice in fatal.NOTICES),
        fatal.DEVICE_ASSERT_SAID, *fatal.PROCESS_HEADERS_SAID]
LIVE = {"kernel", "faulthandler"}  # the kernel's OOM killer prints no file here; faulthandler is met live above


@pytest.fixture(scope="module")
def installed(lab: LabPaths) -> dict[str, str]:
    """Where each package the patterns quote lives in the lab's env (found without importing it)."""
    names = sorted({said.package for said in SAID} - LIVE)
    probe = ("import importlib.util, json, sys\nout = {}\nfor name in sys.argv[1:]:\n"
             "    spec = importlib.util.find_spec(name)\n"
             "    out[name] = list(spec.submodule_search_locations or [])[:1] and spec.submodule_search_locations[0] "
             "or spec.origin\nprint(json.dumps(out))\n")
    done = subprocess.run([str(lab.python), "-c", probe, *names], capture_output=True, text=True, timeout=120,
                          check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("said", [s for s in SAID if s.package not in LIVE],
                         ids=lambda s: f"{s.package}:{s.path or '-'}:{s.literal[:30]}")
def test_each_pattern_quotes_what_the_installed_library_prints(said: fatal.Said, installed: dict[str, str]) -> None:
    where = Path(installed[said.package])
    path = where / said.path if said.path else where
    if path.suffix == ".so" or ".so." in path.name:
        if not path.exists():
            pytest.skip(f"{path.name} is not in this env: its library is built without CUDA")
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            assert data.find(said.literal.encode()) >= 0, f"{said.literal!r} is not in {path}"
        return
    assert said.literal in path.read_text(errors="replace"), f"{said.literal!r} is not in {path}"


@pytest.mark.parametrize("sig", sorted(fatal.FATAL_SIGNALS), ids=lambda sig: sig.name)
def test_the_shells_report_of_each_fatal_signal_is_read(sig: signal.Signals, tmp_path: Path) -> None:
    """/bin/sh (what a launch runs the job with) reports a child killed by a signal in the C library's words."""
    done = subprocess.run(["/bin/sh", "-c", f"/bin/sh -c 'kill -{sig.name[3:]} $$'; :"], capture_output=True,
                          text=True, timeout=30, check=False)
    fault = fault_from_log((done.stdout + done.stderr).encode())
    assert (fault.exc_type, fault.fatal) == (fatal.signal_kind(sig), True), done.stderr
