"""tools/logs.py and tools/tracebacks.py: cleaning vLLM job logs and finding the traceback that explains them.

Every ``*.log`` with an ``*.expected.json`` beside it, under tests/data/logs (synthetic) and
tests/data/lab_logs (captured from the real lab), must yield the expected root cause.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tools.logs import (
    GENERIC_WRAPPER_SIGNALS,
    Frame,
    LineCleaner,
    LogLine,
    Traceback,
    WrapperSignal,
    clean_lines,
    extract_tracebacks,
    fingerprint,
    frame_origin,
    root_cause,
)
from tools.tracebacks import MAX_FRAMES, MAX_MESSAGE_CHARS

DATA = Path(__file__).parent / "data"
SYNTHETIC = DATA / "logs"
LAB = DATA / "lab_logs"
SITE = "/opt/venv/lib/python3.11/site-packages"


def _cases(directory: Path) -> list[Path]:
    return sorted(log for log in directory.glob("*.log") if log.with_suffix(".expected.json").exists())


def _fixture(name: str) -> list[LogLine]:
    return clean_lines((SYNTHETIC / name).read_bytes())


def _tracebacks(text: str) -> list[Traceback]:
    return extract_tracebacks(clean_lines(text.encode()))


# ---- the expected root cause of every captured and synthetic log ----------------------------------------


@pytest.mark.parametrize("log", _cases(SYNTHETIC) + _cases(LAB), ids=lambda log: f"{log.parent.name}/{log.stem}")
def test_root_cause_matches_expected(log: Path) -> None:
    expected = json.loads(log.with_suffix(".expected.json").read_text())
    root = root_cause(extract_tracebacks(clean_lines(log.read_bytes())))
    assert root is not None
    if expected["exc_type"] is None:
        assert root.exc_type is None
    else:
        assert root.short_type == expected["exc_type"].rpartition(".")[2]
    if expected.get("proc_prefix") is None:
        assert root.proc is None
    else:
        assert root.proc is not None and root.proc.startswith(expected["proc_prefix"])
    assert expected.get("message_contains", "") in root.message
    innermost = root.frames[-1]
    assert innermost.file.endswith(expected["innermost_file_endswith"])
    if frame_origin(innermost).kind == "library":
        assert (fingerprint(root).library_file or "").endswith(expected["innermost_file_endswith"])


def test_the_synthetic_cases_exist() -> None:
    names = {log.stem for log in _cases(SYNTHETIC)}
    assert {
        "synthetic_engine_core_init",
        "synthetic_worker_logged",
        "synthetic_chained",
        "synthetic_exception_group",
        "synthetic_tqdm_binary",
        "synthetic_truncated",
    } <= names


# ---- clean_lines -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "proc",
    [
        "Worker pid=1234",
        "EngineCore_DP0 pid=77",
        "VllmWorker rank=0 pid=9",
        "Worker_TP0 pid=5",
        "APIServer pid=3",
        "Worker_TP0_EP0 pid=1584",
    ],
)
def test_process_and_logger_prefixes_are_removed_and_recorded(proc: str) -> None:
    raw = f"({proc}) ERROR 12-02 10:15:01 [multiproc_executor.py:863] WorkerProc hit an exception.\n"
    assert clean_lines(raw.encode()) == [
        LogLine(proc, "ERROR", "multiproc_executor.py:863", "WorkerProc hit an exception.", 1, "12-02 10:15:01")
    ]


def test_coloured_prefixes_and_milliseconds() -> None:
    raw = (
        "\x1b[0;36m(Worker_TP1 pid=42)\x1b[0;0m \x1b[33mWARNING\x1b[0m \x1b[90m12-02 10:15:01.123\x1b[0m "
        "\x1b[90m[v1/worker/gpu_worker.py:7]\x1b[0m slow \x1b]0;title\x07step\n"
    )
    (line,) = clean_lines(raw.encode())
    assert (line.proc, line.level, line.timestamp) == ("Worker_TP1 pid=42", "WARNING", "12-02 10:15:01.123")
    assert (line.source, line.text) == ("v1/worker/gpu_worker.py:7", "slow step")


@pytest.mark.parametrize(
    "raw",
    [
        "(see above) for details",
        "INFO: Started server process",
        "ERROR 12-02 10:15:01 [not a source] x",
        "Extracting 12 rows [00:01]",
        "(Worker) no pid here",
        "CRITICAL",
    ],
)
def test_lookalike_prefixes_stay_text(raw: str) -> None:
    (line,) = clean_lines(raw.encode() + b"\n")
    assert (line.proc, line.level, line.source, line.text) == (None, None, None, raw)


def test_undecodable_and_control_bytes_never_crash() -> None:
    lines = clean_lines(b"ok \xff\xfe \xc3\x28 end\x00\x07\nlast line without newline")
    assert [line.text for line in lines] == ["ok \ufffd\ufffd \ufffd( end", "last line without newline"]
    assert [line.lineno for line in lines] == [1, 2]


def test_crlf_record_lines_keep_file_line_numbers() -> None:
    tag = b"INFO 12-02 17:17:02 [cpu_worker.py:89] "
    lines = clean_lines(tag + b"OMP threads binding:\r\n" + tag + b"\tOMP tid: 1\r\n")
    assert [(line.text, line.lineno) for line in lines] == [("OMP threads binding:", 1), ("\tOMP tid: 1", 2)]


def test_prefix_only_lines_keep_their_process() -> None:
    lines = clean_lines(b"(Worker pid=6005) \n(Worker pid=6005)\n")
    assert [(line.proc, line.text) for line in lines] == [("Worker pid=6005", ""), ("Worker pid=6005", "")]


def test_a_ten_thousand_redraw_tqdm_line_becomes_its_last_redraw() -> None:
    lines = _fixture("synthetic_tqdm_binary.log")
    bars = [line for line in lines if line.text.startswith("Processed prompts")]
    assert len(bars) == 1
    assert " 9999/10000 " in bars[0].text and bars[0].lineno == 3
    assert "Starting extraction \ufffd\ufffd broken bytes \ufffd( here" in [line.text for line in lines]


def test_one_line_per_redraw_bars_collapse_per_process() -> None:
    bar = "\rLoading safetensors checkpoint shards: {} Completed | {} [00:00<00:00, 3.5it/s]\n"
    raw = (
        "(Worker_TP0 pid=1) " + bar.format("  0%", "0/2")
        + "(Worker_TP1 pid=2) " + bar.format("  0%", "0/2")
        + "(Worker_TP0 pid=1) " + bar.format("100%", "2/2")
        + "(Worker_TP1 pid=2) " + bar.format(" 50%", "1/2")
    )  # fmt: skip
    lines = clean_lines(raw.encode())
    assert [(line.proc, line.text.split(": ")[1][:4], line.lineno) for line in lines] == [
        ("Worker_TP0 pid=1", "100%", 3),
        ("Worker_TP1 pid=2", " 50%", 4),
    ]


def test_different_bars_and_text_between_redraws_are_kept() -> None:
    raw = "\rAdding:  50%|# | 1/2\rAdding: 100%|##| 2/2\rdone\rProcessed prompts:  10%|#| 1/1\n"
    assert [line.text for line in clean_lines(raw.encode())] == [
        "Adding: 100%|##| 2/2",
        "done",
        "Processed prompts:  10%|#| 1/1",
    ]


def test_feeding_in_small_chunks_gives_the_same_lines() -> None:
    data = (SYNTHETIC / "synthetic_engine_core_init.log").read_bytes() + "naïve tail €\n".encode()
    cleaner = LineCleaner()
    lines = [line for at in range(0, len(data), 7) for line in cleaner.feed(data[at : at + 7])]
    assert lines + cleaner.finish() == clean_lines(data)


def test_an_endless_redraw_line_is_held_bounded() -> None:
    cleaner = LineCleaner()
    for step in range(60_000):
        assert cleaner.feed(f"\rProcessed prompts: {step % 100:3d}%|#| {step}/60000 [00:01<00:02]".encode()) == []
    assert len(cleaner._pending) < 2 << 20
    (line,) = cleaner.finish()
    assert line.text.endswith("59999/60000 [00:01<00:02]")


# ---- extract_tracebacks ----------------------------------------------------------------------------------


def test_engine_core_and_driver_tracebacks_do_not_mix() -> None:
    tagged, copy, driver = extract_tracebacks(_fixture("synthetic_engine_core_init.log"))
    assert (tagged.proc, tagged.level, tagged.exc_type) == ("EngineCore_DP0 pid=4711", "ERROR", "TypeError")
    assert (copy.proc, copy.level) == ("EngineCore_DP0 pid=4711", None)
    assert copy.frames[0].file == "/usr/lib/python3.11/multiprocessing/process.py"
    assert [frame.file.rpartition("/")[2] for frame in copy.frames[2:]] == [
        frame.file.rpartition("/")[2] for frame in tagged.frames
    ]
    assert tagged.frames[-1] == Frame(
        f"{SITE}/speculators/models/eagle3.py",
        7,
        "__init__",
        'self.layers = [LlamaDecoderLayer(config, prefix="model.layers.0", layer_idx=0)]',
    )
    assert driver.proc is None and driver.message.startswith("Engine core initialization failed.")
    assert not any("speculators" in frame.file for frame in driver.frames)


def test_interleaved_worker_records_are_read_per_process() -> None:
    handled, tp0, tp1, note, engine, driver = extract_tracebacks(_fixture("synthetic_worker_logged.log"))
    assert (handled.level, handled.exc_type) == ("WARNING", "ModuleNotFoundError")
    assert (tp0.proc, tp0.exc_type, tp1.proc, tp1.exc_type) == (
        "Worker_TP0 pid=5101",
        "KeyError",
        "Worker_TP1 pid=5102",
        "AttributeError",
    )
    assert tp0.frames[-1].file.endswith("custom_worker.py") and tp1.frames[-1].file.endswith("functional.py")
    assert note.exc_type == "KeyError"  # vLLM adds the traceback again as a note
    assert engine.proc == "EngineCore_DP0 pid=5100"
    assert driver.exc_type == "vllm.v1.engine.exceptions.EngineDeadError"
    assert root_cause([driver, engine, tp1, tp0, handled]) is tp0


def test_chained_causes_point_back_to_the_first_exception() -> None:
    (last,) = extract_tracebacks(_fixture("synthetic_chained.log"))
    middle = last.cause
    assert middle is not None and middle.cause is not None
    first = middle.cause
    assert [last.exc_type, middle.exc_type, first.exc_type] == ["RuntimeError", "KeyError", "AttributeError"]
    assert (last.context_kind, middle.context_kind, first.context_kind, first.cause) == (
        "cause",
        "context",
        None,
        None,
    )
    assert first.first_lineno < middle.first_lineno < last.first_lineno
    assert "leaked semaphore" not in last.message
    assert root_cause([last]) is first


def test_exception_groups_keep_their_members() -> None:
    (group,) = extract_tracebacks(_fixture("synthetic_exception_group.log"))
    assert group.exc_type == "ExceptionGroup"
    assert group.message == "unhandled errors in a TaskGroup (2 sub-exceptions)"
    assert group.frames[-1].func == "__aexit__"
    tokenize, writers = group.exceptions
    assert tokenize.exc_type == "RuntimeError" and tokenize.context_kind == "cause"
    assert tokenize.cause is not None and tokenize.cause.exc_type == "ValueError"
    assert writers.exc_type == "ExceptionGroup" and [m.exc_type for m in writers.exceptions] == ["OSError"]
    assert writers.exceptions[0].message == "[Errno 28] No space left on device: '/data/hs/shard_0003.pt'"
    assert group.last_lineno == writers.exceptions[0].last_lineno + 1


def test_bare_members_and_chained_groups() -> None:
    text = (
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "/work/job/x.py", line 3, in <module>\n'
        "  | ExceptionGroup: many (2 sub-exceptions)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | ValueError: plain\n"
        "    +---------------- 2 ----------------\n"
        "    | TypeError: also\n"
        "    +------------------------------------\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/work/job/x.py", line 9, in <module>\n'
        "RuntimeError: wrapped\n"
    )
    (wrapped,) = _tracebacks(text)
    assert wrapped.exc_type == "RuntimeError" and wrapped.cause is not None
    assert [m.exc_type for m in wrapped.cause.exceptions] == ["ValueError", "TypeError"]
    assert root_cause([wrapped]) is wrapped.cause.exceptions[0]


def test_a_truncated_traceback_keeps_its_frames() -> None:
    (truncated,) = extract_tracebacks(_fixture("synthetic_truncated.log"))
    assert (truncated.exc_type, truncated.message, truncated.proc) == (None, "", "Worker_TP0 pid=6101")
    assert truncated.frames[-1].func == "linear"


def test_multi_line_messages_stop_at_the_next_record() -> None:
    (validation,) = extract_tracebacks(clean_lines((LAB / "01_scheduler_config_missing_field.log").read_bytes()))
    lines = validation.message.split("\n")
    assert lines[:2] == ["1 validation error for SchedulerConfig", "is_encoder_decoder"]
    assert lines[-1].strip().startswith("For further information visit")


def test_deep_recursion_keeps_the_innermost_frames_and_a_bounded_message() -> None:
    frames = "".join(f'  File "/work/job/r.py", line {n}, in f{n}\n    f{n + 1}()\n' for n in range(200))
    text = f"Traceback (most recent call last):\n{frames}  [Previous line repeated 996 more times]\n"
    (deep,) = _tracebacks(text + "RecursionError: " + "x" * 10_000 + "\n")
    assert len(deep.frames) == MAX_FRAMES and deep.omitted_frames == 200 - MAX_FRAMES
    assert deep.frames[-1] == Frame("/work/job/r.py", 199, "f199", "f200()")
    assert len(deep.message) == MAX_MESSAGE_CHARS


def test_syntax_errors_and_untrusted_messages_are_only_text() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/work/job/gen.py", line 2\n'
        "    eval(__import__('os').system('false'))\n"
        "         ^\n"
        "SyntaxError: __import__('os').system('rm -rf /')\n"
    )
    (error,) = _tracebacks(text)
    assert error.frames == (Frame("/work/job/gen.py", 2, "", "eval(__import__('os').system('false'))"),)
    assert error.message == "__import__('os').system('rm -rf /')"


@pytest.mark.parametrize(
    "data",
    [
        b"Traceback (most recent call last):\n" + b" " * 200_000 + b"File x\n",
        b'Traceback (most recent call last):\n  File "' + b"x" * 200_000 + b"\n",
        b"Traceback (most recent call last):\n" + b"a." * 100_000 + b"\n",
        b"1" * 200_000 + b"%|\n" + b"(" * 200_000 + b") x\n" + b"INFO 12-02 10:15:01 [" + b"a" * 200_000 + b"\n",
        b"\x1b[" + b"1;" * 100_000 + b"\n\x1b]" + b"x" * 200_000 + b"\n",
        b"Traceback (most recent call last):\n" * 20_000,
    ],
    ids=["spaces", "unclosed-quote", "dotted", "lookalikes", "escapes", "headers-only"],
)
def test_hostile_lines_parse_in_linear_time(data: bytes) -> None:
    started = time.perf_counter()
    root_cause(extract_tracebacks(clean_lines(data)))
    assert time.perf_counter() - started < 5  # backtracking regexes would take minutes here


def test_several_tracebacks_in_one_stream_come_out_in_order() -> None:
    one = 'Traceback (most recent call last):\n  File "/x.py", line {0}, in f\nValueError: {0}\n'
    text = "".join(one.format(n) + f"INFO 12-02 10:15:0{n} [x.py:1] step {n}\n" for n in range(3))
    assert [traceback.message for traceback in _tracebacks(text)] == ["0", "1", "2"]


# ---- root_cause ------------------------------------------------------------------------------------------


def test_root_cause_of_nothing_and_of_wrappers_only() -> None:
    assert root_cause([]) is None
    (generic,) = _tracebacks(
        "Traceback (most recent call last):\n"
        '  File "/x.py", line 1, in <module>\n'
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    assert root_cause([generic]) is generic


def test_wrapper_signals_are_data() -> None:
    assert all(isinstance(signal, WrapperSignal) for signal in GENERIC_WRAPPER_SIGNALS)
    (dead,) = _tracebacks(
        "Traceback (most recent call last):\n"
        '  File "/x.py", line 1, in <module>\n'
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
    )
    assert WrapperSignal(exc_type="EngineDeadError").matches(dead)
    assert not WrapperSignal(exc_type="RuntimeError").matches(dead)
    assert WrapperSignal(message="ENGINECORE encountered").matches(dead)


# ---- fingerprint and frame_origin ------------------------------------------------------------------------


def _single(message: str, exc_type: str = "RuntimeError") -> Traceback:
    (traceback,) = _tracebacks(
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/vllm/v1/worker/gpu_worker.py", line 10, in execute_model\n'
        f'  File "{SITE}/torch/nn/functional.py", line 2, in linear\n'
        '  File "/work/job/hooks.py", line 4, in hook\n'
        f"{exc_type}: {message}\n"
    )
    return traceback


def test_fingerprints_ignore_what_changes_between_runs() -> None:
    one = fingerprint(_single("pid=4242 tensor at 0x7f3a2b4c1d00 has 12 rows, wanted 8.5 in '/tmp/run1/x.pt'"))
    two = fingerprint(_single("pid=77 tensor at 0xdeadbeef has 3 rows, wanted 1.0 in '/data/other/y.pt'"))
    assert one == two
    assert one.message == "tensor at ADDR has N rows, wanted N in PATH"
    assert (one.exc_type, one.library_file, one.library_func) == (
        "RuntimeError",
        "torch/nn/functional.py",
        "linear",
    )
    assert len(one.key) == 16
    assert fingerprint(_single("same", "TypeError")).key != fingerprint(_single("same", "ValueError")).key


def test_frame_origins() -> None:
    assert frame_origin(Frame(f"{SITE}/vllm/v1/engine/core.py", 1, "f")) == frame_origin(
        Frame(f"{SITE}/vllm/v1/engine/core.py", 9, "g")
    )
    library = frame_origin(Frame(f"{SITE}/speculators/models/eagle3.py", 1, "f"))
    assert (library.kind, library.package, library.path) == (
        "library",
        "speculators",
        "speculators/models/eagle3.py",
    )
    assert frame_origin(Frame("/usr/lib/python3/dist-packages/six.py", 1, "f")).package == "six"
    assert frame_origin(Frame("/usr/lib/python3.11/asyncio/runners.py", 1, "run")).kind == "stdlib"
    assert frame_origin(Frame("<frozen runpy>", 1, "_run_module_as_main")).kind == "stdlib"
    assert frame_origin(Frame("/work/my-site-packages-tool/x.py", 1, "f")).kind == "user"
    user = frame_origin(Frame("/work/job/extract.py", 1, "main"))
    assert (user.kind, user.package, user.path) == ("user", None, "/work/job/extract.py")
    assert frame_origin(Frame("/srv/vllm/vllm/x.py", 1, "f"), library_markers=("/srv/vllm/",)).package == "vllm"
