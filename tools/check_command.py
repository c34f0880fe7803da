"""The command of one of medic's own output checks, as the validator runs it in the target env (tools/
validate_output.py for a saved ``.pt``, tools/hs_job.py for a speculators >= 0.5 client's safetensors folder)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinCheck:
    argv: list[str]
    stdin: str  # the check's script: it runs in the target env from stdin, nothing copied to the host
    output: str
    model: str

    def describe(self) -> str:
        return f"medic's own check of {self.output} against {self.model}"
