"""The postmortem's lines for a two-process job: server loads and client runs counted apart, the reloads saved.

A client-side fix reruns only the client against the loaded server; the naive strategy (restart everything
after every fault) would have loaded the server once per attempt: each client run, and each server that died
while it loaded.
"""

from __future__ import annotations

from agent.record.tracefile import Trace


def server_lines(trace: Trace) -> list[str]:
    servers = [e.data for e in trace.events if e.kind == "server"]
    if not servers:
        return []
    started = [d for d in servers if d.get("event") == "started"]
    ready = [d for d in servers if d.get("event") == "ready"]
    died = [d for d in servers if d.get("event") in ("exited", "timeout")]
    clients = [e.data for e in trace.events if e.kind == "launch" and e.data.get("kind") == "target"]
    naive = len(clients) + len(died)
    saved = max(0, naive - len(started))
    loads = ", ".join(f"S{d.get('n')} port {d.get('port')} pid {d.get('pid')}: ready after {d.get('seconds')} s"
                      for d in ready)
    target = (trace.header.get("config") or {}).get("target") or {}
    command = " ".join(target.get("server_command") or [])
    return [f"server: `{command}`" if command else "server: (none named)",
            f"server loads: {len(started)} ({loads or 'none ready'}), client runs: {len(clients)}; "
            f"the naive strategy (restart everything after every fault) would load the server {naive} time(s): "
            f"{saved} reload(s) saved"]
