"""How fast medic reads a job log: ``python -m bench.logs [megabytes]`` from the repository root.

Writes a synthetic vLLM-like log (process- and logger-prefixed INFO lines, speculators' own log lines,
tqdm bars redrawn with \\r, the shard loader's one-line-per-redraw bar, a few tracebacks) to a temporary
directory, then times ``clean_lines`` + ``extract_tracebacks`` over it in this fresh process. The last line
printed is ``key=value`` figures, ``parse_mb_s=<x>`` first, for scripts to read. ``parse_mb_s`` counts
megabytes per CPU-second of the (single-threaded) parse, so other work on a shared machine does not skew
it; the wall-clock figure is printed above it.

Two more figures follow it:

* ``follow_latency_ms``: a detached run (``tools.runs.launch``) writes a line every 20-60 ms, each stamped
  with ``time.time()``, while this process polls ``tools.runs.follow``; a line's latency is the time it was
  seen minus its stamp. Measured on LocalHost and over SSH to a throwaway sshd on 127.0.0.1 (the tests'
  fixture, tests/fixtures_ssh.py), each both polling back to back (every 50 ms) and at the agent's own
  cadence (follow, status, then ``Deps.poll_interval``); the figure is the SSH p50 at the agent's cadence.
* ``rss_mb``: peak RSS (``ru_maxrss``) of a subprocess that tails a 1 GB log from its start to its end with
  ``follow`` + ``LineCleaner``, the way the agent follows a long run.

Everything runs on this machine (loopback only) and lives in temporary folders removed at the end.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.synthetic_log import write_synthetic_log
from tools.host import Host, LocalHost
from tools.logs import LineCleaner, clean_lines, extract_tracebacks, root_cause
from tools.runs import Run, follow, launch, status

DEFAULT_MEGABYTES = 100
TAIL_MEGABYTES = 1000  # the log the tailing subprocess reads through
AGENT_POLL_SECONDS = 0.5  # agent.deps.Deps.poll_interval: how often the agent's watch loop follows a run
TIGHT_POLL_SECONDS = 0.05

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


# ---- follow latency: a live run's lines, seen by medic ---------------------------------------------------

# Run by the target's python as the detached run: one stamped, vLLM-like line every 20-60 ms.
_WRITER = """import random, sys, time
count, rng = int(sys.argv[1]), random.Random(3)
for seq in range(count):
    time.sleep(rng.uniform(0.02, 0.06))
    sys.stdout.write("INFO 12-02 10:15:01 [loggers.py:123] Engine 000: stamp=%.6f seq=%d\\n" % (time.time(), seq))
    sys.stdout.flush()
"""
_STAMP = re.compile(rb"stamp=(\d+\.\d+) seq=\d+")


def follow_latencies(host: Host, run_dir: str, lines: int, poll_seconds: float, with_status: bool) -> list[float]:
    """Seconds from each line's stamp to the end of the ``follow`` call that returned it (complete lines)."""
    run = launch(host, [sys.executable, "-c", _WRITER, str(lines)], run_dir=run_dir)
    latencies: list[float] = []
    offset, tail, deadline = 0, b"", time.monotonic() + lines * 0.06 + 30
    while len(latencies) < lines and time.monotonic() < deadline:
        chunk = follow(host, run, offset)
        seen = time.time()
        offset, data = chunk.offset, tail + chunk.data
        complete, _, tail = data.rpartition(b"\n")
        latencies += [seen - float(stamp) for stamp in _STAMP.findall(complete)]
        if with_status and status(host, run).state != "running" and not chunk.data:
            break
        time.sleep(poll_seconds)
    return latencies


def _summary(latencies: list[float]) -> str:
    if not latencies:
        return "no line seen"
    ms = sorted(1000 * x for x in latencies)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms, max {ms[-1]:.0f} ms ({len(ms)} lines)"


@contextmanager
def loopback_sshd(folder: Path) -> Iterator[Host | None]:
    """An SSHHost to a throwaway sshd on 127.0.0.1, set up as tests/fixtures_ssh.py sets up the tests' one;
    None when this machine has no sshd."""
    from tests.fixtures_ssh import LOOPBACK, SSHD, SSHServer, _write_sshd_config, free_port, keygen

    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        yield None
        return
    folder.mkdir(mode=0o700)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    host_key = keygen(folder / "host_ed25519").split()
    (folder / "authorized_keys").write_text(keygen(folder / "user_ed25519") + "\n")
    port = free_port()
    _write_sshd_config(folder, port)
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(f"[{LOOPBACK}]:{port} {host_key[0]} {host_key[1]}\n")
    server = SSHServer(folder=folder, host=LOOPBACK, port=port, user=getpass.getuser(),
                       key_path=str(folder / "user_ed25519"), known_hosts_path=str(known_hosts),
                       config_path=str(folder / "ssh_config"),  # none: the target names everything
                       alias="", host_public_key=" ".join(host_key[:2]), log_path=str(folder / "sshd.log"))
    server.start()
    try:
        ssh_host = server.connect()
        try:
            yield ssh_host
        finally:
            ssh_host.close()
    finally:
        server.stop()


def bench_follow() -> float:
    """Append-to-seen latency of ``follow`` on LocalHost and over SSH; prints each, returns the SSH p50 at
    the agent's cadence in ms (NaN without an sshd)."""
    headline = float("nan")
    cadences = (
        (f"back to back, every {TIGHT_POLL_SECONDS * 1000:.0f} ms", TIGHT_POLL_SECONDS, False, 60),
        (f"agent cadence, follow+status every {AGENT_POLL_SECONDS:.1f} s", AGENT_POLL_SECONDS, True, 120),
    )
    with tempfile.TemporaryDirectory(prefix="medic-bench-follow-") as tmp, loopback_sshd(Path(tmp) / "sshd") as ssh:
        hosts: list[tuple[str, Host]] = [("local", LocalHost())]
        if ssh is None:
            print("follow over ssh: skipped, no /usr/sbin/sshd (apt-get install openssh-server)")
        else:
            hosts.append(("ssh", ssh))
        for name, host in hosts:
            for cadence, poll, with_status, lines in cadences:
                latencies = follow_latencies(host, f"{tmp}/runs-{name}", lines, poll, with_status)
                print(f"follow latency, {name}, {cadence}: {_summary(latencies)}")
                if name == "ssh" and with_status and latencies:
                    headline = 1000 * statistics.median(latencies)
    return headline


# ---- peak memory of tailing a huge log ------------------------------------------------------------------


def tail_log(run_dir: str) -> None:
    """The tailing subprocess: ``follow`` a run's log from 0 to its end through a ``LineCleaner``."""
    host, run = LocalHost(), Run.in_dir(run_dir)
    cleaner, offset, lines = LineCleaner(), 0, 0
    started = time.perf_counter()
    while True:
        chunk = follow(host, run, offset)
        if not chunk.data:
            break
        offset = chunk.offset
        lines += len(cleaner.feed(chunk.data))
    lines += len(cleaner.finish())
    seconds = time.perf_counter() - started
    hwm = next((line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM:")), "0")
    print(f"tail: {offset / 1e6:.0f} MB, {lines:,} clean lines in {seconds:.1f} s = {offset / 1e6 / seconds:.0f} MB/s"
          f" (VmHWM {int(hwm) / 1024:.0f} MB)")


def measure_tail(run_dir: str) -> None:
    """Run ``tail_log`` in a child and print its ``ru_maxrss``. Linux carries a process's peak RSS across
    fork and exec (a child's ru_maxrss is at least its parent's RSS when it started), so the child is started
    from this small process, never from the bench itself with its parsed 100 MB log."""
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--tail", run_dir])
    _, wait_status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(wait_status)
    if child.returncode != 0:
        sys.exit(f"the tailing subprocess exited with {child.returncode}")
    print(f"ru_maxrss_kb={usage.ru_maxrss}")  # Linux: kilobytes


def bench_tail_rss(megabytes: float = TAIL_MEGABYTES) -> float:
    """Peak RSS (ru_maxrss, MB) of a fresh process that tails a ``megabytes`` log with follow + LineCleaner."""
    with tempfile.TemporaryDirectory(prefix="medic-bench-tail-") as tmp:
        block_path, run_dir = Path(tmp) / "block.log", Path(tmp) / "run"
        write_synthetic_log(block_path, 8)  # an 8 MB vLLM-like block, written again until the log is big
        block = block_path.read_bytes()
        block_path.unlink()
        run_dir.mkdir()
        with (run_dir / "log").open("wb") as out:
            for _ in range(max(1, round(megabytes * 1e6 / len(block)))):
                out.write(block)
        del block
        size_mb = (run_dir / "log").stat().st_size / 1e6
        measured = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure-tail", str(run_dir)],
                                  capture_output=True, text=True, check=True)
    lines = measured.stdout.splitlines()
    rss_mb = int(lines.pop().removeprefix("ru_maxrss_kb=")) / 1024
    print("\n".join(lines))
    print(f"tail of a {size_mb:.0f} MB log: peak RSS {rss_mb:.0f} MB")
    return rss_mb

def main() -> None:
    if sys.argv[1:2] == ["--tail"]:  # the tailing subprocess of bench_tail_rss
        tail_log(sys.argv[2])
        return
    if sys.argv[1:2] == ["--measure-tail"]:  # the small process that starts it and reads its rusage
        measure_tail(sys.argv[2])
        return
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MEGABYTES
    figures = {"parse_mb_s": bench_parse(megabytes)}
    figures["follow_latency_ms"] = bench_follow()
    figures["rss_mb"] = bench_tail_rss()
    print(" ".join(f"{name}={value:.1f}" for name, value in figures.items()))


if __name__ == "__main__":
    main()
