"""What the graph's nodes are given: host, config, launcher, repair engine, trace and view. Passed in, never global."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.config import SessionConfig
from agent.events import EventKind
from agent.job import seen_through
from agent.launchers import launcher_for
from agent.launchers.base import Launcher, LauncherDeps
from agent.record.trace import TraceWriter
from agent.record.view import View
from agent.remedies import arg_edits, env_edits, job_env, with_options
from agent.repair.engine import RepairEngine
from agent.repair.types import RepairContext
from agent.state import PreflightInfo, SessionState
from tools.host import Host


class Settings(Protocol):
    """What the routers (and the checks they share with replay) read beside the state: the session's config and
    its clock. Deps is one; replay passes its own, with the trace's config and the recorded time."""

    @property
    def config(self) -> SessionConfig: ...

    def clock(self) -> float: ...


@dataclass
class Deps:
    host: Host
    config: SessionConfig
    engine: RepairEngine
    trace: TraceWriter
    view: View = field(default_factory=View)
    clock: Callable[[], float] = time.time
    poll_interval: float = 0.5
    # what the library answered (signatures, protocols, device probes): it does not change within a session,
    # and each answer costs an import of vLLM in the target env, so the scan's every pass and the repairs share it
    library_memo: dict[str, Any] = field(default_factory=dict)
    # how launches run (detached, shard runs, Slurm, a server first): launcher_for picks it from the config;
    # a test passes another factory (agent/launchers/scripted.py)
    launcher_factory: Callable[[LauncherDeps], Launcher] = launcher_for
    launcher: Launcher = field(init=False)
    # work started now and wanted later (the canary's build, while the scan reads the library): by name
    background: dict[str, Future[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.launcher = self.launcher_factory(LauncherDeps(self.host, self.config, self.record, self.clock,
                                                           self.poll_interval))

    def in_background(self, name: str, work: Callable[[], Any]) -> None:
        """Start ``work`` on a thread of its own; ``awaited(name)`` gives its answer (or raises its error)."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"medic-{name}")
        self.background[name] = pool.submit(work)
        pool.shutdown(wait=False)  # the thread ends with its work; nothing else is ever queued on it

    def awaited(self, name: str) -> tuple[bool, Any]:
        """(whether ``name`` was started in this process and not yet awaited, its answer), waiting for it."""
        future = self.background.pop(name, None)
        return (False, None) if future is None else (True, future.result())

    def context(self, state: SessionState) -> RepairContext:
        """The repair context, rebuilt from what preflight recorded (so a resumed session has it too)."""
        pre: PreflightInfo = state.get("preflight") or {}
        target = self.config.target
        kept = state.get("patches") or []
        return RepairContext(
            host=self.host,
            python=target.python,
            roots=tuple(pre.get("roots", ())),
            fixable_packages=tuple(target.fixable_packages),
            library_packages=tuple(target.library_packages),
            workdir=target.workdir,
            own_roots=tuple(target.extra_patch_roots),
            versions=dict(pre.get("versions", {})),
            site_packages=tuple(pre.get("site_packages", ())),
            server_command=tuple(with_options(seen_through(target, state).server_command or (),  # a wrapper's too
                                              arg_edits(kept, "server"))),
            job_command=tuple(with_options(target.command or (), arg_edits(kept))),
            # what the next launch runs with: the library's answers are asked with it, as the job will meet them
            job_env=job_env(self.host, target.env, env_edits(kept))[0],
            device=target.device,
            medic_dir=self.config.medic_dir,
            memo=self.library_memo,
        )

    def record(self, kind: EventKind, node: str, data: dict[str, Any] | None = None) -> None:
        """One place for what happened: the trace (redacted, flushed) and the live view."""
        self.trace.event(kind, node, data)
        self.view.event(kind, node, data or {})
