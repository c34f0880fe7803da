"""validate: exit code 0 is a claim, not a result. The validator command decides.

The lab's validator prints a JSON report (shapes for every sequence, values against an fp32 reference); any
other validator is judged by its exit code. A wrong output becomes a Fault like any crash.
"""

from __future__ import annotations

import json
from typing import Any

from agent.deps import Deps
from agent.nodes.diagnose import record_fault
from agent.nodes.launch import canary_commands
from agent.repair.types import Fault
from agent.state import SessionState

VALIDATE_TIMEOUT = 1800.0


def validate(state: SessionState, deps: Deps) -> dict[str, Any]:
    target = deps.config.target
    canary = (state.get("run") or {}).get("kind") == "canary"
    command = canary_commands(state, deps)[1] if canary else target.validate_command
    if not command:
        detail = "the run exited 0 but no --validate command was given, so nothing verified its output"
        deps.record("validate", "validate", {"summary": detail, "verified": False})
        return {"outcome": "unverified", "outcome_detail": detail}
    result = deps.host.run(list(command), timeout=VALIDATE_TIMEOUT, cwd=target.workdir,
                           env=target.env)
    report = parse_report(result.stdout)
    verified = result.exit_code == 0 and report.get("verified", True) is True
    problems = report.get("problems") or [line for line in (result.stdout + result.stderr).splitlines()
                                          if line.strip()][-20:]
    summary = ((f"verified: {report['sequences']} sequences, per-layer max abs error "
                f"{report.get('max_abs_error_per_layer', {})}" if "sequences" in report
                else f"verified by `{' '.join(command)[:120]}` (exit 0)") if verified
               else f"NOT verified (exit {result.exit_code}): {'; '.join(problems[:3])}")
    deps.record("validate", "validate", {"summary": summary, "verified": verified, "report": report,
                                         "exit_code": result.exit_code})
    if verified and canary:  # the cheap run is right: now the target model, once
        deps.record("canary_passed", "validate", {"launch": (state.get("run") or {}).get("n")})
        return {"validation": report, "canary_done": True, "fault": None}
    if verified:
        return {"validation": report, "outcome": "verified", "outcome_detail": summary}
    if result.exit_code == 2 or not report:
        # the validator could not read the output: nothing to repair from, say so
        return {"validation": report, "outcome": "unverified", "outcome_detail": summary}
    fault = Fault("canary" if canary else "validate", "OutputMismatch", "\n".join(problems), (),
                  caller_frames=tuple(last_caller_frames(state)), fingerprint="validate:" + problems[0][:60])
    deps.record("fault", "validate", {"stage": "validate", "summary": fault.summary})
    return {"validation": report, **record_fault(state, fault, launch=(state.get("run") or {}).get("n"))}


def parse_report(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def last_caller_frames(state: SessionState) -> list[Any]:
    """A wrong output has no traceback: the code on the last crash's path is where its cause likely is."""
    from agent.repair.types import FrameRef

    for fault in reversed(state.get("faults") or []):
        frames = fault.get("caller_frames") or []
        if frames:
            return [FrameRef(**f) for f in frames]
    return []
