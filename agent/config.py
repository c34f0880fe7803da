"""Session configuration: what to run where, how to know it worked, and what medic may spend."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.scheduler import ShardSettings, SlurmSettings

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def medic_home() -> Path:
    """Where sessions, checkpoints and locks live on the machine medic runs on."""
    return Path(os.environ.get("MEDIC_HOME", Path.home() / ".medic"))


class Target(BaseModel):
    """The user's job: a command in a workdir, run by the target env's python on a host."""

    model_config = ConfigDict(extra="forbid")
    host: str = "local"  # "local", an ~/.ssh/config alias, or user@host[:port]
    python: str  # the target env's interpreter: its site-packages are a patch root
    workdir: str  # the run's folder: the other patch root; medic's runs and ledger go under .medic/
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    validate_command: list[str] | None = None  # exit 0 = verified; None: nothing can verify it
    fixable_packages: list[str] = Field(default_factory=lambda: ["speculators"])
    library_packages: list[str] = Field(default_factory=lambda: ["vllm"])
    trust_new_host: bool = False
    model_dir: str | None = None  # the target model's folder: medic derives the canary from its config.json
    output: str | None = None  # what the job saves: medic's own check reads it when no validate_command is given
    canary_command: list[str] | None = None  # same driver on a tiny model of the same architecture
    canary_validate_command: list[str] | None = None
    # patch roots beyond the env's own site-packages and the workdir: only where the user names them
    extra_patch_roots: list[str] = Field(default_factory=list)
    # a two-process job (tools/server_job.py): this server is started first, and the command (the client)
    # runs once its health endpoint answers; ``{port}`` in either is the server's port
    server_command: list[str] | None = None
    server_port: int | None = Field(default=None, ge=1, le=65535)  # None: medic picks a free loopback port
    server_ready_timeout: float = Field(default=1800.0, gt=0)
    keep_server: bool = False  # leave the server running when the session ends
    # the device the job runs on; None: the one the target env's torch sees (a GPU host says cuda by itself)
    device: Literal["cuda", "cpu"] | None = None

    @field_validator("python", "workdir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path on the target host, not {value!r}")
        return value.rstrip("/") or "/"

    @field_validator("extra_patch_roots")
    @classmethod
    def _absolute_roots(cls, values: list[str]) -> list[str]:
        return [cls._absolute(value) for value in values]


class Budgets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_launches: int = Field(default=12, ge=1)  # target-model launches
    max_wall: float = Field(default=4 * 3600.0, gt=0)  # seconds for the whole session
    max_candidates_per_fault: int = Field(default=4, ge=1)
    launch_timeout: float = Field(default=3600.0, gt=0)  # a launch that runs longer is stopped


class SessionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    target: Target
    budgets: Budgets = Field(default_factory=Budgets)
    mode: Literal["unattended", "approve"] = "unattended"
    confirm_launch: bool = False
    scan: bool = True  # static drift scan before the first launch
    canary: bool = True  # run the canary first when target.canary_command is set
    # start the target's launch while the canary runs, where the two share no accelerator and write apart
    # (agent/launchers/beside.py); it is kept only if nothing changed meanwhile
    overlap: bool = True
    traces_dir: str = "traces"
    llm: dict[str, str] | None = None  # LLM settings (agent/llm/chat.py); secrets come from the environment
    policy_file: str | None = None
    notify: str | None = None  # a shell command told when the session waits for a person, ends or stops
    slurm: SlurmSettings | None = None  # None: detached processes on the host; else Slurm jobs submitted there
    shards: ShardSettings | None = None  # detached shards (N runs on the host); a Slurm array's are in slurm
    # a fresh session reusing an old id must not inherit its host-side ledger (launches, patches)
    instance: str = Field(default_factory=lambda: uuid.uuid4().hex[:8])

    @field_validator("session_id")
    @classmethod
    def _session_id(cls, value: str) -> str:
        if not SESSION_ID.match(value):
            raise ValueError("a session id is letters, digits, '.', '_' or '-' (at most 64)")
        return value

    @property
    def medic_dir(self) -> str:
        """Where every session of this workdir keeps its folder on the target host (ledgers are siblings)."""
        return f"{self.target.workdir}/.medic"

    @property
    def host_dir(self) -> str:
        """medic's folder on the target host: run dirs and the side-effect ledger."""
        return f"{self.medic_dir}/{self.session_id}-{self.instance}"

    @property
    def ledger_dir(self) -> str:
        return f"{self.host_dir}/patches"
