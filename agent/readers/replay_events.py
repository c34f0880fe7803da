"""What a recorded event says, for replay (agent/readers/replay.py): the node it shows ran, and the patch files
and frames its data holds in the shape of the graph state."""

from __future__ import annotations

import re

from agent.patch_records import FilePatchData, FrameData
from agent.readers.tracefile import Event, Trace

# which node an event shows ran; the first of these after a decision is what the session did
NODE_OF = {"launch": "launch", "scan": "scan", "fault": "diagnose", "candidate": "repair", "no_repair": "repair",
           "approval": "approve", "policy": "approve", "applied": "apply", "patch_refused": "apply",
           "reverted": "revert", "confirm": "confirm",
           "validate": "validate", "resubmit": "resubmit", "exit": "report"}
# a node that may record nothing: the trace then shows what came after it
SILENT = {"verify": ("scan", "launch", "confirm", "revert", "report"), "budget_stop": ("report",)}


def medic_failed(ev: Event) -> bool:
    """medic's own failure ended the run here (agent/session.py internal_error): not a decision of the graph, and
    `medic resume` goes on from the node that failed, as after a kill."""
    return ev.kind == "exit" and ev.node == "session"


def stops(ev: Event) -> bool:
    """medic stopped here and went on later: what came just before was not followed by what the graph chose."""
    return ev.kind == "resume" or medic_failed(ev)


def refused_revert(ev: Event) -> bool:
    """The revert node's warning that a patch could not come off (agent/nodes/patching.py revert)."""
    return ev.kind == "warning" and ev.node == "revert"


def node_of(ev: Event) -> str:
    """The node an event shows ran: a fault is diagnose's, unless the scan predicted it or validate met it (a
    validator that could not run at all records its fault with no verdict before it)."""
    if ev.kind == "fault" and ev.node in ("scan", "validate"):
        return ev.node
    if refused_revert(ev):
        return "revert"
    if medic_failed(ev):
        return "resume"
    return NODE_OF.get(ev.kind, ev.kind)


def until(events: list[Event], *kinds: str) -> list[Event]:
    out = []
    for e in events:
        if e.kind in kinds and not medic_failed(e):
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


# a session waiting for a person ends its run without an exit event, at the question it asked
QUESTIONS = {"approval": "a person's answer on a patch (`medic approve`) or a host change",
             "confirm": "a person to confirm the next launch"}


def waiting_for(trace: Trace) -> str | None:
    """What a whole trace that ends at a person's question waits for (None: it ends, or stops anywhere else)."""
    if trace.truncated:
        return None
    last = trace.events[-1] if trace.events else None  # an exit event is no question: it ends here
    question = next((QUESTIONS[e.kind] for e in reversed(trace.events) if e.kind in QUESTIONS), None)
    return question if last is not None and last.kind in (*QUESTIONS, "checks_queued", "notify", "warning") else None


def where_it_stops(trace: Trace) -> str | None:
    """None when the trace ends with the session's exit event; else one line on where and how it stops."""
    ends = [e for e in trace.events if e.kind in ("exit", "resume")]
    if ends and ends[-1].kind == "exit" and not trace.truncated:
        return None
    last = trace.events[-1] if trace.events else None
    at = f"line {last.index} ({last.kind})" if last else "the header"
    if trace.truncated:
        return f"the trace stops at {at}: {trace.problem}"
    question = waiting_for(trace)
    if question:
        return f"the trace stops at {at} with no exit event: the session waits for {question}"
    return (f"the trace stops at {at} with no exit event: medic was stopped or killed there, or the session "
            f"still runs; nothing after it could be compared")


def redone(ev: Event, rest: list[Event]) -> bool:
    """``ev`` is a node's record that a resume made it write again: medic was stopped after the node recorded it
    but before LangGraph's checkpoint of the node, so the resumed graph ran the node again from its first line
    (apply, whose ledger keeps the file from being patched twice, then records the same patch again)."""
    if ev.kind not in NODE_OF or ev.kind == "exit":
        return False
    resumed = False
    for e in rest:
        if stops(e):
            resumed = True
        elif e.kind in NODE_OF or refused_revert(e):
            return resumed and (e.kind, e.node, key_of(e)) == (ev.kind, ev.node, key_of(ev))
    return False


def watched_again(ev: Event, rest: list[Event]) -> bool:
    """``ev`` (a run_end) was written by a watch that medic was stopped in before LangGraph's checkpoint of it: the
    resumed graph watched the same launch again (its ``checks_queued`` comes before any other node's record), and
    that watch's run_end is the one that counts."""
    resumed = False
    for e in rest:
        if stops(e):
            resumed = True
        elif e.kind == "checks_queued":
            return resumed and e.data.get("launch") == ev.data.get("launch")
        elif e.kind in NODE_OF or e.kind == "run_end":
            return False
    return False


def key_of(ev: Event) -> str:
    """What names the thing an event records: its patch, its launch, its fault."""
    d = ev.data
    return str(d.get("patch_id") or d.get("n") or d.get("fingerprint") or d.get("summary") or "")


def verify_run(segment: list[Event]) -> list[Event]:
    """The check events of the verify run the session kept. medic stopped inside verify, or before its checkpoint,
    runs it again from its first check on resume: the last run that recorded any is the one whose result counts."""
    runs: list[list[Event]] = [[]]
    for e in segment:
        if stops(e):
            runs.append([])
        elif e.kind == "check" and e.node == "verify":
            runs[-1].append(e)
    return next((run for run in reversed(runs) if run), [])
