"""The postmortem's lines for a two-process job: server loads and client runs counted apart, the reloads saved.

A client-side fix reruns only the client against the loaded server, and the scan repairs what it sees before
the server loads at all. The naive strategy has neither: every fault, wherever medic found it, costs one whole
load of the server, and the run that verifies one more (bench/server.py counts the same way).
"""

from __future__ import annotations

from agent.record.tracefile import Trace


def server_lines(trace: Trace) -> list[str]:
    servers = [e.data for e in trace.events if e.kind == "server"]
    if not servers:
        return []
    started = [d for d in servers if d.get("event") == "started"]
    ready = [d for d in servers if d.get("event") == "ready"]
    clients = [e.data for e in trace.events if e.kind == "launch" and e.data.get("kind") == "target"]
    faults = sum(1 for e in trace.events if e.kind == "fault")
    verified = any(e.kind == "exit" and e.data.get("outcome") == "verified" for e in trace.events)
    naive = faults + int(verified)
    saved = max(0, naive - len(started))
    loads = ", ".join(f"S{d.get('n')} port {d.get('port')} pid {d.get('pid')}: ready after {d.get('seconds')} s"
                      for d in ready)
    target = (trace.header.get("config") or {}).get("target") or {}
    command = " ".join(target.get("server_command") or [])
    return [f"server: `{command}`" if command else "server: (none named)",
            f"server loads: {len(started)} ({loads or 'none ready'}), client runs: {len(clients)}; "
            f"the naive strategy (restart everything after every fault) would load the server {naive} time(s): "
            f"{saved} reload(s) saved"]
