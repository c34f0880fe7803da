"""Exception messages that span lines reach the report and the postmortem whole (issue 14, item 9).

tests/data/logs/captured_spawn_without_main_guard.log was captured from the lab's real vLLM 0.16.0: a script
that builds ``LLM(...)`` at module level, run with VLLM_WORKER_MULTIPROC_METHOD=spawn. The spawned EngineCore
re-runs the script and multiprocessing refuses to start another process with a RuntimeError of five
indented paragraphs; the driver's "Engine core initialization failed" follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.config import SessionConfig, Target
from agent.nodes.diagnose import fault_from_log
from agent.readers.postmortem import postmortem_markdown
from agent.readers.postmortem_html import postmortem_html
from agent.readers.tracefile import read_trace
from agent.record.report import render_report
from tools.logs import clean_lines, extract_tracebacks, fingerprint, message_line, root_cause
from tools.tracebacks import MAX_SUMMARY_CHARS

LOG = Path(__file__).parent / "data" / "logs" / "captured_spawn_without_main_guard.log"
TRACE = Path(__file__).parent / "data" / "traces" / "lab_session.jsonl"
PARAGRAPHS = [
    "An attempt has been made to start a new process before the current process has finished its bootstrapping "
    "phase.",
    "This probably means that you are not using fork to start your child processes and you have forgotten to use "
    "the proper idiom in the main module:",
    "if __name__ == '__main__': freeze_support() ...",
    'The "freeze_support()" line can be omitted if the program is not going to be frozen to produce an '
    "executable.",
    'To fix this issue, refer to the "Safe importing of main module" section in '
    "https://docs.python.org/3/library/multiprocessing.html",
]
WHOLE = " ".join(PARAGRAPHS)


def _lines(data: bytes) -> list[str]:
    return data.decode().splitlines(keepends=True)


def test_a_message_of_several_paragraphs_is_read_to_the_end_of_its_traceback() -> None:
    data = LOG.read_bytes()
    child, driver = extract_tracebacks(clean_lines(data))
    assert root_cause([child, driver]) is child
    assert message_line(child.message) == WHOLE
    assert "\n\n" in child.message  # the raw message keeps its lines, for repairs that read them
    last = next(i for i, line in enumerate(_lines(data), 1) if "library/multiprocessing.html" in line)
    assert child.last_lineno == last  # the whitespace-only line after it and the driver's traceback are not in it
    assert message_line(driver.message) == "Engine core initialization failed. See root cause above. " \
                                           "Failed core proc(s): {}"
    fault = fault_from_log(data)
    assert fault.summary == f"RuntimeError: {WHOLE}"


def test_prefixed_and_interleaved_lines_give_the_same_message() -> None:
    """The same traceback as a prefixed child writes it, with many lines of another process between its
    paragraphs; after it, a blank line and the child's own unindented output, which is not part of the message."""
    out: list[str] = []
    for line in _lines(LOG.read_bytes()):
        out.append(f"(EngineCore_DP0 pid=4711) {line}")
        if not line.strip():  # enough of them to run past the parser's first window of lines
            out += [f"(Worker_TP0 pid=4712) INFO 12-03 09:27:13 [gpu_worker.py:7] loading {n}\n" for n in range(40)]
    tagged = "".join(out) + "(EngineCore_DP0 pid=4711) \n(EngineCore_DP0 pid=4711) exit 1\n"
    child = root_cause(extract_tracebacks(clean_lines(tagged.encode())))
    assert child is not None and child.proc == "EngineCore_DP0 pid=4711"
    assert message_line(child.message) == WHOLE


def test_a_long_message_is_cut_visibly_and_its_fingerprint_stays_that_of_the_repeated_fault() -> None:
    data = LOG.read_text()
    again = re.sub(r"line \d+", "line 999", data.replace("/tmp/mp2/", "/data/job-2/")).replace("12135", "4242")
    one, two = (fingerprint(root_cause(extract_tracebacks(clean_lines(d.encode())))) for d in (data, again))
    assert one.key == two.key and len(one.message) <= 512
    long = 'Traceback (most recent call last):\n  File "/x.py", line 1, in f\nValueError: {}\n    {}\n'
    first, second = (long.format("x" * 700, tail).encode() for tail in ("run 1 tail", "run 2 tail"))
    a, b = (root_cause(extract_tracebacks(clean_lines(text))) for text in (first, second))
    assert a is not None and b is not None and fingerprint(a).key == fingerprint(b).key
    summary = fault_from_log(first).summary
    assert summary == "ValueError: " + "x" * (MAX_SUMMARY_CHARS - 1) + "…"


def test_the_report_and_the_postmortem_show_the_whole_message(tmp_path: Path) -> None:
    fault = fault_from_log(LOG.read_bytes())
    state = {"outcome": "no_repair", "outcome_detail": "no patch", "launches": [], "patches": [],
             "faults": [{"stage": "crash", "exc_type": fault.exc_type, "message": fault.message,
                         "frames": [], "launch": 1}]}
    config = SessionConfig(session_id="s", target=Target(python="/usr/bin/python3", workdir="/tmp",
                                                         command=["python", "extract.py"]))
    assert f"`RuntimeError: {WHOLE}`" in render_report(state, config)  # type: ignore[arg-type]
    rows = TRACE.read_text().splitlines()
    at = next(i for i, row in enumerate(rows) if '"kind": "fault"' in row)
    record = json.loads(rows[at])
    record["data"]["summary"] = fault.summary  # what diagnose records for this fault
    rows[at] = json.dumps(record)
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(rows) + "\n")
    trace = read_trace(path)
    assert f"`RuntimeError: {WHOLE}`" in postmortem_markdown(trace)
    assert WHOLE.replace('"', "&quot;").replace("'", "&#x27;") in postmortem_html(trace)
