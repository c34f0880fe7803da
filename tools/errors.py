"""The one exception family of medic.

Every error medic raises on purpose is a ``MedicError``: it carries a one-line message that says what did
not happen and what to try next, and the process exit code the CLI uses. The CLI catches ``MedicError`` in
one place and prints ``medic: <message>``; anything else is a bug and keeps its traceback.

    MedicError                      exit 10 (internal_error) unless a subclass says otherwise
    ├── UsageError                  exit 2  bad input: config, arguments, ssh alias, missing target python
    ├── HostError                           the host could not do what was asked
    │   ├── HostKeyError            exit 2  unknown or changed host key: refused before any command is sent
    │   ├── HostUnreachable                 connect failed or the transport dropped (retried by SSHHost)
    │   └── CommandTimeout                  a command ran past its deadline and was killed
    ├── RunError                            a detached run: missing run dir, vanished log
    ├── SourceError                         the target env could not answer a source question
    ├── PatchError                          a patch was refused; nothing on disk changed
    │   ├── StaleContext                    the diff does not apply with zero fuzz
    │   ├── OutsideRoots                    a path (or a symlink it goes through) leaves the allowed roots
    │   └── PatchDoesNotCompile             the patched text is not valid Python
    ├── LabError                            building or checking the embedded lab failed
    │   └── PinsConflict            exit 2  a lab's two releases declare requirements no venv can meet
    ├── TraceError                  exit 2  a trace that cannot be read (not JSON, unknown version, empty)
    ├── SessionError                exit 2  unknown session or patch id, session locked by another process
    ├── NotProven                           a repair's proof that no change it may make keeps the result: the
    │   │                                   stop's reason, kept by the repair engine (agent/repair/types.py)
    │   └── ImportMismatch                  the fixable package does not import as shipped (derived_packages.py)
    └── LLMError                            the model endpoint failed after its retries, or broke protocol

How a session ENDS is not an error: it is an outcome (verified, budget, no_repair, waiting, …), and
agent/outcomes.py is the one table of outcome → exit code → meaning. The two codes here are two of its rows:
no error of medic's exits 1 (Python's own code for an uncaught exception), so a 1 from medic is a verdict
(``medic lab check``, ``medic replay``), never a crash.
"""

from __future__ import annotations

BAD_INPUT_EXIT = 2  # outcome "bad_input"
INTERNAL_ERROR_EXIT = 10  # outcome "internal_error"


class MedicError(Exception):
    """Base of every deliberate medic error. ``str(err)`` is one line meant for a person."""

    exit_code = INTERNAL_ERROR_EXIT

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()) if "\n" in message else message)


class UsageError(MedicError):
    exit_code = BAD_INPUT_EXIT


class HostError(MedicError):
    pass


class HostKeyError(HostError):
    exit_code = BAD_INPUT_EXIT  # the person checks the key and says so (known_hosts, --trust-new-host)


class HostUnreachable(HostError):
    pass


class CommandTimeout(HostError):
    pass


class RunError(MedicError):
    pass


class SourceError(MedicError):
    pass


class PatchError(MedicError):
    pass


class StaleContext(PatchError):
    pass


class OutsideRoots(PatchError):
    pass


class PatchDoesNotCompile(PatchError):
    pass


class LabError(MedicError):
    pass


class PinsConflict(LabError):
    """A lab asked for two releases whose declared requirements cannot meet in one venv: the request, not the
    build, is wrong (nothing is kept of it)."""

    exit_code = BAD_INPUT_EXIT


class TraceError(MedicError):
    exit_code = BAD_INPUT_EXIT


class SessionError(MedicError):
    exit_code = BAD_INPUT_EXIT


class LLMError(MedicError):
    pass
