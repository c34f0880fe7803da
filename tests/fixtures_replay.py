"""Every trace the suite writes is replayed when the run ends, so every real session in it is a replay test too.

At the end of each worker's run (pytest-xdist: each worker replays the traces it wrote; the controller fails the
run on what they report) every medic trace written during the run under the worker's temporary folders, its
$MEDIC_HOME and the repository's traces/ is replayed in process (no host, no LLM: milliseconds each). A
divergence, a trace that cannot be read, or one cut mid-line fails the run, naming the trace. A trace that stops
without an exit event is fine here (a test leaves a session waiting for a person, or kills medic on purpose): its
decisions up to that point are still compared.

A test that writes a broken trace on purpose says so with ``replay_exempt(path, why)``; nothing is skipped
silently.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.readers.replay import replay
from tools.errors import TraceError

REPO = Path(__file__).resolve().parents[1]
MEDIC_HOME = Path(os.environ["MEDIC_HOME"]) if os.environ.get("MEDIC_HOME") else None
SKIP_DIRS = {"site-packages", "__pycache__", ".git", "node_modules", "dist-packages"}
EXEMPT: dict[Path, str] = {}  # this worker's traces broken on purpose, and why
STARTED = time.time()
ROOTS: list[Path] = []


def replay_exempt(path: Path, why: str) -> None:
    """``path`` is written broken on purpose (cut, edited to diverge): the end-of-run replay leaves it out."""
    EXEMPT[path.resolve()] = why


def traces_under(root: Path, since: float) -> list[Path]:
    """medic traces under ``root`` changed since ``since``; venvs (the labs' copies) are not walked."""
    found = []
    for folder, dirs, files in os.walk(root):
        if "pyvenv.cfg" in files:
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            path = Path(folder) / name
            if name.endswith(".jsonl") and is_trace(path, since):
                found.append(path)
    return found


def is_trace(path: Path, since: float) -> bool:
    try:
        if path.stat().st_mtime < since:
            return False
        with path.open("rb") as fh:
            return b'"medic-trace"' in fh.readline(1 << 20)
    except OSError:
        return False


# how every session's trace begins: the graph's first node, or medic's own failure before it recorded anything
SESSION_STARTS = ("preflight", "exit", "resume", "stopped")


def is_session(path: Path) -> bool:
    """A session's trace names its config in the header and begins where the graph begins. A unit test that runs
    one node on a state of its own (its TraceWriter, or make_deps's) records no session to re-decide."""
    try:
        with path.open("rb") as fh:
            header, first = json.loads(fh.readline()), fh.readline()
        kind = json.loads(first).get("kind") if first.strip() else None
    except (OSError, ValueError, AttributeError):
        return True  # unreadable: replay says why
    return not isinstance(header, dict) or (bool(header.get("config")) and kind in (None, *SESSION_STARTS))


@dataclass
class Replayed:
    sessions: int = 0
    exempt: int = 0
    node_level: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, other: dict[str, Any]) -> None:
        self.sessions += other["sessions"]
        self.exempt += other["exempt"]
        self.node_level += other["node_level"]
        self.failures += other["failures"]


def replay_all(roots: list[Path], since: float) -> Replayed:
    """Each trace written since ``since`` replayed; a failure is one line naming the trace."""
    done = Replayed()
    seen: set[Path] = set()
    for root in roots:
        for path in traces_under(root, since) if root.is_dir() else []:
            path = path.resolve()
            if path in seen:
                continue
            seen.add(path)
            if path in EXEMPT:
                done.exempt += 1
                continue
            if not is_session(path):
                done.node_level += 1
                continue
            done.sessions += 1
            try:
                result = replay(path)
            except TraceError as err:
                done.failures.append(str(err))
                continue
            if result.first_divergence:
                done.failures.append(f"{path}: {result.first_divergence}")
            elif result.stopped and "truncated" in result.stopped:  # the writer never leaves half a line
                done.failures.append(f"{path}: {result.stopped}")
    return done


@pytest.fixture(scope="session", autouse=True)
def replay_roots(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The folders this worker's sessions write their traces in."""
    ROOTS[:] = [tmp_path_factory.getbasetemp(), *([MEDIC_HOME] if MEDIC_HOME else []), REPO / "traces"]


COLLECTED = Replayed()  # the controller of an xdist run: what its workers' replays found


def pytest_sessionfinish(session: pytest.Session) -> None:
    done = replay_all(ROOTS, STARTED) if ROOTS else Replayed()  # ROOTS is empty where no test ran
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports and fails the run
        workeroutput["replayed"] = asdict(done)
        return
    done.add(asdict(COLLECTED))
    report(session, done)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    replayed = (getattr(node, "workeroutput", None) or {}).get("replayed")
    if replayed:
        COLLECTED.add(replayed)


def report(session: pytest.Session, done: Replayed) -> None:
    if not done.sessions and not done.failures:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"trace replay: {done.sessions} session trace(s) this run wrote replayed, {len(done.failures)} not "
             f"exact; {done.exempt} broken on purpose (replay_exempt), {done.node_level} a single node's events",
             *done.failures]
    if reporter is not None:
        reporter.write_sep("=", "trace replay", red=bool(done.failures), green=not done.failures)
        for line in lines:
            reporter.write_line(line)
    if done.failures:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
