"""The one reading of a signature record that decides a repair: does the OUTERMOST callable reject ``name=``?

Used by the host (tools/source.py ``Signature.rejects_keyword``) and inside the target env (the corpus test),
so both read a record the same way. Part of the source probe (see tools/source_probe.py): stdlib only.
"""

from __future__ import annotations

from typing import Any

KEYWORD_KINDS = ("positional_or_keyword", "keyword_only")


def rejects_keyword(record: dict[str, Any], name: str) -> bool | None:
    """True only when provably rejected; False when provably taken; None when a layer is unknown."""
    if not record.get("exact"):
        return None
    params = record["params"]
    if record.get("open_keywords") or any(p["kind"] == "var_keyword" for p in params):
        return False
    return not any(p["name"] == name and p["kind"] in KEYWORD_KINDS for p in params)
