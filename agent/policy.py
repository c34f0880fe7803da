"""Approval policy: which proposed patches may be applied without asking, which never, and which ask.

A YAML (or TOML) file of rules, e.g.::

    rules:
      - name: drop-stale-kwargs
        action: allow
        kind: "derived:unexpected_kwarg:*"      # the candidate's origin (fnmatch)
        package: speculators                    # the package under site-packages (fnmatch, or a list)
      - name: no-model-patches-to-vllm
        action: deny
        kind: llm
        file: "*/vllm/*"                         # the patched file's absolute path (fnmatch)

A rule matches when each matcher it sets matches (a list: any of its patterns). A deny rule matches a patch
if it matches ANY of its files, an allow rule only if it matches EVERY file: a patch that strays into a file
the rule does not cover is not waved through. Deny wins over allow; a patch no rule matches asks a person.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.config import SessionConfig
from agent.patch_records import CandidateData
from tools.errors import UsageError
from tools.site_dirs import package_of

Decision = Literal["allow", "deny", "ask"]


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    action: Literal["allow", "deny"]
    kind: list[str] | None = None  # repair kinds: "derived:unexpected_kwarg:*", "playbook:*", "llm"
    package: list[str] | None = None
    file: list[str] | None = None

    @field_validator("kind", "package", "file", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("file")
    @classmethod
    def _file_glob(cls, value: list[str] | None) -> list[str] | None:
        # paths are absolute on the host: a relative glob would silently never match
        bad = [g for g in value or [] if not g.startswith(("/", "*"))]
        if bad:
            raise ValueError(f"a file glob is absolute or starts with '*', not {bad[0]!r}")
        return value

    def matches_file(self, path: str) -> bool:
        if self.file is not None and not any(fnmatch.fnmatchcase(path, g) for g in self.file):
            return False
        pkg = package_of(path)
        return self.package is None or (pkg is not None and any(fnmatch.fnmatchcase(pkg, g) for g in self.package))

    def matches(self, origin: str, paths: list[str]) -> bool:
        if self.kind is not None and not any(fnmatch.fnmatchcase(origin, g) for g in self.kind):
            return False
        if not paths:  # an environment remedy: only a rule that names its kind, and no file, speaks for it
            return self.kind is not None and self.file is None and self.package is None
        hits = [self.matches_file(p) for p in paths]
        return any(hits) if self.action == "deny" else all(hits)


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[Rule] = Field(default_factory=list)

    @field_validator("rules")
    @classmethod
    def _unique_names(cls, rules: list[Rule]) -> list[Rule]:
        names = [r.name for r in rules]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise ValueError(f"two rules are named {dup!r}; the trace names rules, so names must be unique")
        return rules


def load_policy(path: str | Path) -> Policy:
    """The policy in ``path``; any problem is one UsageError line naming the file and the field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the policy {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"policy {path} is not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: "
                         f"{' '.join(str(exc).split())[:200]}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"policy {path} must be a mapping with a `rules:` list")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top)"
        raise UsageError(f"policy {path}: {where}: {err['msg']}") from exc


def proposal_files(proposal: CandidateData) -> list[str]:
    return [f["path"] for f in proposal["patch"].get("files", ())]


def decide(policy: Policy, proposal: CandidateData) -> tuple[Decision, Rule | None]:
    """allow / deny / ask for a proposal, and the rule that decided it."""
    origin = proposal.get("origin") or proposal["patch"].get("origin") or ""
    paths = proposal_files(proposal)
    matching = [r for r in policy.rules if r.matches(origin, paths)]
    for action in ("deny", "allow"):
        rule = next((r for r in matching if r.action == action), None)
        if rule is not None:
            return action, rule
    return "ask", None


def policy_answer(config: SessionConfig, proposal: CandidateData) -> dict[str, Any] | None:
    """The approve node's auto-answer under ``config.policy_file``, or None to ask a person."""
    if not config.policy_file:
        return None
    decision, rule = decide(load_policy(config.policy_file), proposal)
    if decision == "allow" and rule is not None:
        return {"action": "approve", "by": f"policy:{rule.name}", "reason": f"allowed by policy rule {rule.name}"}
    if decision == "deny" and rule is not None:
        return {"action": "reject", "by": "policy", "reason": f"denied by policy rule {rule.name}"}
    return None

