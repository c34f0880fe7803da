"""The postmortem's lines for a two-process job: server loads and client runs counted apart, the reloads saved.

A client-side fix reruns only the client against the loaded server, and the scan repairs what it sees before
the server loads at all. The naive strategy has neither: every fault, wherever medic found it, costs one whole
load of the server, and the run that verifies one more (bench/server.py counts the same way). The reloads saved
are a figure only where they mean one: a verified output, or a fix that reran the client against a loaded server.
"""

from __future__ import annotations

from agent.readers.tracefile import Trace


def server_counts(trace: Trace) -> dict[str, int]:
    """Server loads, client runs, and the naive strategy's loads (bench/server.py prints these three)."""
    started = [e for e in trace.events if e.kind == "server" and e.data.get("event") == "started"]
    clients = [e for e in trace.events if e.kind == "launch" and e.data.get("kind") == "target"]
    faults = sum(1 for e in trace.events if e.kind == "fault")
    verified = any(e.kind == "exit" and e.data.get("outcome") == "verified" for e in trace.events)
    return {"server_loads": len(started), "client_runs": len(clients), "naive_server_loads": faults + int(verified)}


def server_lines(trace: Trace) -> list[str]:
    ready = [e.data for e in trace.events if e.kind == "server" and e.data.get("event") == "ready"]
    if not any(e.kind == "server" for e in trace.events):
        return []
    counts = server_counts(trace)
    naive = counts["naive_server_loads"]
    saved = max(0, naive - counts["server_loads"])
    loads = ", ".join(f"S{d.get('n')} port {d.get('port')} pid {d.get('pid')}: ready after {d.get('seconds')} s"
                      for d in ready)
    target = (trace.header.get("config") or {}).get("target") or {}
    command = " ".join(target.get("server_command") or [])
    outcome = next((str(e.data.get("outcome")) for e in trace.events if e.kind == "exit"), "unfinished")
    if outcome == "verified" or counts["client_runs"] > counts["server_loads"]:
        savings = (f"the naive strategy (restart everything after every fault) would load the server {naive} "
                   f"time(s): {saved} reload(s) saved")
    else:  # nothing reached a verified output, and no fix ran against a loaded server: no saving to speak of
        savings = "no reloads saved to count: the session ended unverified and no fix ran against a loaded server"
    return [f"server: `{command}`" if command else "server: (none named)",
            f"server loads: {counts['server_loads']} ({loads or 'none ready'}), client runs: {counts['client_runs']}; "
            + savings]
