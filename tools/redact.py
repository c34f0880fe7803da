"""Secrets out of everything medic writes: traces, reports, prompts, checkpoints.

Two nets: the VALUES of secret-looking environment variables and config fields (known at start), and common
key shapes (API keys, bearer tokens, key=value passwords) for secrets nobody told us about.

Paths are not secrets: $PWD/$OLDPWD (print working directory, not a password), names that say they hold a path
(``*_FILE``, ``*_PATH``, ``SSH_AUTH_SOCK``...) and any value that is an existing absolute path or one of the
job's own paths stay readable, so traces still replay and reports still say where things are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

# PWD only as a later word (DB_PWD, MYSQL_PWD): a leading PWD or OLDPWD is the working directory
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|_PWD(?=_|$))", re.I)
# the name says its value is where a secret lives, not the secret (KEY_FILE, HF_TOKEN_PATH, XAUTHORITY)
PATH_NAME = re.compile(r"((^|_)(FILE|PATH|DIR|SOCK|HOME|ROOT)S?$|^XAUTHORITY$)", re.I)
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


def secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None and PATH_NAME.search(name) is None


class Redactor:
    def __init__(self, known: Iterable[str] = (), keep: Iterable[str] = ()) -> None:
        self.keep = {p.rstrip("/") or "/" for p in keep if p}  # the job's paths: never a secret
        self.known: list[str] = []
        self.add(*known)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, extra: Iterable[str] = (),
                         keep: Iterable[str] = ()) -> Redactor:
        env = os.environ if env is None else env
        return cls([v for k, v in env.items() if secret_name(k)] + list(extra), keep)

    def is_path(self, value: str) -> bool:
        """An absolute path of the job or of this machine: a place, never a secret."""
        return value.startswith("/") and ((value.rstrip("/") or "/") in self.keep or os.path.exists(value))

    def add(self, *values: str) -> None:
        fresh = {v for v in values if v and len(v) >= MIN_SECRET_LEN and not self.is_path(v)}
        self.known = sorted(set(self.known) | fresh, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.known:
            value = value.replace(secret, MASK)
        for pattern in PATTERNS:
            value = pattern.sub(self._mask, value)
        return value

    def _mask(self, match: re.Match[str]) -> str:
        if match.lastindex == 2 and self.is_path(match.group(2)):  # `--key-file /etc/x.pem`: a place
            return match.group(0)
        return (match.group(1) if match.lastindex else "") + MASK

    def data(self, value: Any) -> Any:
        """The same structure with every string redacted (and secret-named mapping values masked)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                k: (MASK if isinstance(k, str) and secret_name(k) and isinstance(v, str) and v
                    and not self.is_path(v) else self.data(v))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            # argv: the word after a secret-named flag (`--api-key VALUE`) is the secret
            out: list[Any] = []
            for i, item in enumerate(value):
                before = value[i - 1] if i else None
                secret_flag = isinstance(before, str) and SECRET_FLAG.match(before) is not None
                masked = secret_flag and isinstance(item, str) and item and not self.is_path(item)
                out.append(MASK if masked else self.data(item))
            return out
        return value
