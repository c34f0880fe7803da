"""An approval is of the diff a person read: ``stale_files`` compares each file's bytes now with the sha256 the
patch was made from. The logic only reads files, so it runs on a FunctionHost (in-memory files, no process)."""

from __future__ import annotations

import pytest

from agent.approval import refuse_if_stale, stale_files
from agent.patch_records import CandidateData, PatchData
from tools.errors import SessionError
from tools.host import FunctionHost
from tools.patches import sha256

ORIGINAL = b"def f(x):\n    return x\n"


def proposal_for(path: str, content: bytes) -> CandidateData:
    patch: PatchData = {"id": "abc123", "files": [{"path": path, "diff": "", "sha256_before": sha256(content),
                                                   "sha256_after": ""}]}
    return {"patch": patch, "origin": "derived:test", "rationale": "", "evidence": [], "checks": []}


def no_commands(line: str) -> str:
    raise AssertionError(f"stale_files ran a command: {line}")


def test_unchanged_file_is_not_stale() -> None:
    host = FunctionHost(no_commands, files={"/env/mod.py": ORIGINAL})
    assert stale_files(host, proposal_for("/env/mod.py", ORIGINAL)["patch"]) == []
    refuse_if_stale(host, "s1", proposal_for("/env/mod.py", ORIGINAL))  # no error


def test_changed_and_vanished_files_are_named() -> None:
    host = FunctionHost(no_commands, files={"/env/mod.py": ORIGINAL + b"# edited by hand\n"})
    stale = stale_files(host, proposal_for("/env/mod.py", ORIGINAL)["patch"])
    assert len(stale) == 1 and stale[0].startswith("/env/mod.py changed")
    assert stale_files(host, proposal_for("/env/gone.py", ORIGINAL)["patch"]) == ["/env/gone.py no longer exists"]
    with pytest.raises(SessionError, match=r"patch abc123 of session s1 is stale: /env/mod.py changed"):
        refuse_if_stale(host, "s1", proposal_for("/env/mod.py", ORIGINAL))
