"""What a recorded event says, for replay (agent/record/replay.py): the node it shows ran, and the patch files
and frames its data holds in the shape of the graph state."""

from __future__ import annotations

import re

from agent.record.tracefile import Event
from agent.state import FilePatchData, FrameData

# which node an event shows ran; the first of these after a decision is what the session did
NODE_OF = {"launch": "launch", "scan": "scan", "fault": "diagnose", "candidate": "repair", "no_repair": "repair",
           "approval": "approve", "policy": "approve", "applied": "apply", "patch_refused": "apply",
           "reverted": "revert", "confirm": "confirm",
           "validate": "validate", "resubmit": "resubmit", "exit": "report"}
# a node that may record nothing: the trace then shows what came after it
SILENT = {"verify": ("scan", "launch", "confirm", "revert", "report"), "budget_stop": ("report",)}


def refused_revert(ev: Event) -> bool:
    """The revert node's warning that a patch could not come off (agent/nodes/patching.py revert)."""
    return ev.kind == "warning" and ev.node == "revert"


def node_of(ev: Event) -> str:
    """The node an event shows ran: a fault is diagnose's, unless the scan predicted it."""
    if ev.kind == "fault" and ev.node == "scan":
        return "scan"
    if refused_revert(ev):
        return "revert"
    return NODE_OF.get(ev.kind, ev.kind)


def until(events: list[Event], *kinds: str) -> list[Event]:
    out = []
    for e in events:
        if e.kind in kinds:
            break
        out.append(e)
    return out


def diff_files(diff: str) -> list[FilePatchData]:
    """The diff split per file, as the state's Patch dicts hold it (only path and diff are needed here)."""
    parts = re.split(r"(?m)^(?=--- )", diff)
    out = []
    for part in parts:
        if not part.startswith("--- "):  # env edits and host steps are not files
            continue
        m = re.match(r"--- a(\S+)", part)
        out.append(FilePatchData(path=m.group(1) if m else "", diff=part, sha256_before="", sha256_after=""))
    return out


def frame_of(text: str) -> FrameData:
    where, _, func = text.partition(" ")
    file, _, line = where.rpartition(":")
    return {"file": file or where, "line": int(line) if line.isdigit() else 0, "func": func, "code": ""}


