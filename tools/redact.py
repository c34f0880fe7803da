"""Secrets out of everything medic writes: traces, reports, prompts, checkpoints.

Two nets: the VALUES of secret-looking environment variables and config fields (known at start), and common
key shapes (API keys, bearer tokens, key=value passwords) for secrets nobody told us about.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSW|PASSWD|PWD|CREDENTIAL|AUTH)", re.I)
PATTERNS = (
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),  # OpenAI-style keys
    re.compile(r"(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{20,}"),
    re.compile(r"hf_[A-Za-z0-9]{20,}"),
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{12,}"),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|password|passwd)\s*[=:]\s*)([^\s'\",;]{6,})"),
    re.compile(r"(?i)(--?[\w-]*(?:key|token(?!iz)|secret|passw(?:or)?d)[\w-]*\s+)([^\s'\",;-][^\s'\",;]{5,})"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
)
SECRET_FLAG = re.compile(r"(?i)^--?[\w-]*(key|token(?!iz)|secret|passw(or)?d|credential)[\w-]*$")
MASK = "[REDACTED]"
MIN_SECRET_LEN = 6  # shorter values are too common to replace safely


class Redactor:
    def __init__(self, known: Iterable[str] = ()) -> None:
        self.known = sorted({v for v in known if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> Redactor:
        env = os.environ if env is None else env
        return cls([v for k, v in env.items() if SECRET_NAME.search(k)] + list(extra))

    def add(self, *values: str) -> None:
        self.known = sorted(set(self.known) | {v for v in values if v and len(v) >= MIN_SECRET_LEN},
                            key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.known:
            value = value.replace(secret, MASK)
        for pattern in PATTERNS:
            value = pattern.sub(lambda m: (m.group(1) if m.lastindex else "") + MASK, value)
        return value

    def data(self, value: Any) -> Any:
        """The same structure with every string redacted (and secret-named mapping values masked)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                k: (MASK if isinstance(k, str) and SECRET_NAME.search(k) and isinstance(v, str) and v
                    else self.data(v))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            # argv: the word after a secret-named flag (`--api-key VALUE`) is the secret
            out: list[Any] = []
            for i, item in enumerate(value):
                before = value[i - 1] if i else None
                secret_flag = isinstance(before, str) and SECRET_FLAG.match(before) is not None
                out.append(MASK if secret_flag and isinstance(item, str) and item else self.data(item))
            return out
        return value
