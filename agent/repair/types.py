"""What the repair engine reasons about: a fault, the context it is repaired in, and candidate patches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tools.errors import MedicError
from tools.host import Host
from tools.patches import Patch
from tools.site_dirs import installed_in
from tools.tracebacks import message_line


class NotProven(MedicError):
    """A repair knew the fault's class and proved that no change it may make keeps what the job computes: the
    stop's reason, in the repair's words (the engine keeps it; a candidate of another repair still wins).

    ``general``: a proof any fault of its kind ends in (the package does not import as shipped), which names no
    cause; a specific proof another repair gives for the same fault is the stop's reason instead."""

    general = False


FaultStage = Literal["scan", "canary", "crash", "validate", "verify"]
FindingKind = Literal["unexpected_kwarg", "missing_argument", "protocol_step", "return_shape", "device_call",
                      "zero_answer", "grafted_member", "environment", "env_choice", "distribution_name", "capability",
                      "playbook", "interface_limit"]


@dataclass(frozen=True)
class Finding:
    """What a before-launch detector saw, in its own terms (no sentence for a repair to parse back).

    ``callee``/``name``: the call and the keyword, parameter or member it is about; ``detail``: anything else
    the paired repair needs (the library function a protocol step follows, a variable, …).
    """

    kind: FindingKind
    callee: str = ""
    name: str = ""
    detail: str = ""


OutputFact = Literal["short_sequences", "misshapen_sequences", "layer_count_sequences", "off_layers",
                     "missing_sequences"]


@dataclass(frozen=True)
class OutputFacts:
    """What medic's own check (tools/output_check.py) found wrong in an output, as fields — whoever judged it
    wrong: a repair reads these, never the wording of a validator. Sequence indices; layer ids for values."""

    short_sequences: tuple[int, ...] = ()  # fewer rows than tokens (cached or skipped tokens never captured)
    misshapen_sequences: tuple[int, ...] = ()  # any other shape
    layer_count_sequences: tuple[int, ...] = ()  # not one tensor per layer id
    off_layers: tuple[int, ...] = ()  # values beyond the tolerance against the fp32 reference
    missing_sequences: tuple[int, ...] = ()  # rows asked of the job with no record in its output

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> OutputFacts | None:
        """The facts of a check's JSON report; None when it has none (a report of another validator)."""
        names = ("short_sequences", "misshapen_sequences", "layer_count_sequences", "off_layers", "missing_sequences")
        if not any(isinstance(report.get(n), list | tuple) for n in names):
            return None
        return cls(**{n: tuple(int(x) for x in report.get(n) or [] if isinstance(x, int)) for n in names})

    def holds(self, fact: OutputFact) -> bool:
        return bool(getattr(self, fact))


@dataclass(frozen=True)
class FrameRef:
    """One stack frame as the repair engine needs it."""

    file: str
    line: int
    func: str
    code: str = ""


@dataclass(frozen=True)
class Fault:
    """A failure to repair: from a crash's root-cause traceback, the output validator, or the static scan.

    ``frames`` are the root cause's frames, innermost last. ``caller_frames`` are the frames of every
    traceback in the log that lie in code medic may fix (workdir and the fixable packages), innermost last:
    the line that fails is often not the line to fix, and a worker's root cause has no caller frames at all.
    """

    stage: FaultStage
    exc_type: str
    message: str
    frames: tuple[FrameRef, ...]
    caller_frames: tuple[FrameRef, ...] = ()
    fingerprint: str = ""
    proc: str | None = None
    log_excerpt: str = ""
    finding: Finding | None = None  # set by the scan and preflight detectors
    # files of the fixable code the job's driver reaches (the scan's list): where a repair looks when the fault
    # has no traceback to point at (a wrong output); set by the validator
    reach: tuple[str, ...] = ()
    # the process died of something that is not a Python exception (tools/fatal.py), or of a CUDA error torch raised
    # as one (its frames kept): only a repair that proves the call cannot work on this host is asked (registry FATAL)
    fatal: bool = False
    output: OutputFacts | None = None  # a wrong output: what medic's own check measured in it
    # what the run logged at WARNING level before it died, oldest first: a failure the library absorbed (it warned
    # and went on) may be what a later raise is the consequence of (agent/repair/derived_absorbed.py)
    warnings: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        return f"{self.exc_type}: {message_line(self.message)}"  # whole: a message may span lines


@dataclass(frozen=True)
class Check:
    """A check that proves a patch: run before the relaunch (``when="before"``) or during the load."""

    kind: Literal["compile", "import", "signature_has", "member_exists", "grep", "disk_free", "free_memory",
                  "stale_runs", "library_found", "in_range"]
    target: str  # module, file, or "module:Qualname"
    detail: str = ""  # parameter / member name / regex
    when: Literal["before", "during_load"] = "before"

    def describe(self) -> str:
        return f"{self.kind} {self.target}{' ' + self.detail if self.detail else ''}"


@dataclass(frozen=True)
class Candidate:
    """A proposed patch with the reasons for it. ``patch`` is ready for tools.patches.apply_patch."""

    patch: Patch
    origin: str  # "playbook:<id>", "derived:<kind>", "llm"
    rationale: str
    evidence: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()


@dataclass
class RepairContext:
    """Everything a repair may look at. Source questions go to the TARGET env's python on ``host``."""

    host: Host
    python: str
    roots: tuple[str, ...]  # where patches may go: site-packages of the target env, the workdir
    fixable_packages: tuple[str, ...] = ("speculators",)
    library_packages: tuple[str, ...] = ("vllm",)
    workdir: str = ""
    own_roots: tuple[str, ...] = ()  # each --patch-root: the person's code like the workdir (a job's script folder)
    versions: dict[str, str] = field(default_factory=dict)
    site_packages: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()  # the target model's, from its config.json (what the library will build)
    server_command: tuple[str, ...] = ()  # a two-process job's server: the library code it starts is scanned too
    job_command: tuple[str, ...] = ()  # the job's command as the next launch runs it (kept option remedies set)
    job_env: dict[str, str] | None = None  # what the next launch runs with (the job's env and kept remedies)
    device: str | None = None  # the job's device as its target says ("cuda", "cpu"); None: what its torch sees
    model_dir: str = ""  # the job's model folder, read for a wrong output's values (its config.json says the model)
    medic_dir: str = ""  # the workdir's .medic on the host: every session's ledger (the wheel's bytes a patch replaced)
    # caches only (answers of the target env and of the source); every input is a field above
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # probe answers, per context

    def api_packages(self, path: str) -> tuple[str, ...]:
        """Whose installed signatures the code at ``path`` must fit: the libraries', and for the user's own
        driver (the workdir) the fixable packages' too — a driver calls speculators the way speculators calls vLLM."""
        return (*self.library_packages, *self.fixable_packages) if self.in_own_code(path) else self.library_packages

    def library_package(self, path: str) -> str | None:
        """The library package whose installed code ``path`` is; None for the fixable code and anything else."""
        if self.is_fixable(path):
            return None
        return next((pkg for pkg in self.library_packages if installed_in(path, pkg)), None)

    def is_fixable(self, path: str) -> bool:
        """Code medic adapts to the library: the user's own (workdir, --patch-root) and the fixable packages."""
        return self.in_own_code(path) or any(installed_in(path, pkg) for pkg in self.fixable_packages)

    def in_own_code(self, path: str) -> bool:
        """The user's workdir, or a folder they named with --patch-root."""
        return any(root and path.startswith(root.rstrip("/") + "/") for root in (self.workdir, *self.own_roots))
