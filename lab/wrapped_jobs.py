"""The server lab's job as users wrap it: a shell script, or a Python launcher, that starts the server itself.

Upstream's examples, and most people's jobs, start ``vllm serve …`` in the background, wait for ``/health``, run
``speculators generate-offline-data`` and stop the server. Written here for a server lab (its model, dataset, layer
ids and connector; vLLM's own front-end defaults, as upstream's examples leave them), to be typed as
``medic run --python <lab python> --workdir <lab>/work -- bash run.sh`` (or ``-- python launch.py``): no
``--server``, no ``--validate``, no ``--output``. tests/test_wrapped_job.py runs the script;
``python bench/server.py --job script|launcher`` runs either and prints its loads beside the ``--server`` form.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from lab.server_lab import ServerLabPaths

RUN_SH = """#!/bin/bash
MODEL=@MODEL@
PORT=@PORT@
SPEC='@SPEC@'
KV='@KV@'
python -m vllm.entrypoints.cli.main serve "$MODEL" --speculative_config "$SPEC" --kv_transfer_config "$KV" \\
    --host 127.0.0.1 --port $PORT --max-model-len 512 &
SERVER=$!
until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
  kill -0 $SERVER 2>/dev/null || { echo "server died"; exit 1; }
  sleep 1
done
speculators generate-offline-data --model "$MODEL" --endpoint "http://127.0.0.1:$PORT/v1" \\
    --preprocessed-data @DATA@ --output hidden_states --concurrency 2
status=$?
kill $SERVER
wait $SERVER
exit $status
"""

LAUNCH_PY = """import subprocess
import sys
import time
import urllib.request

MODEL = @MODEL@
PORT = @PORT@
SPEC = @SPEC@
KV = @KV@


def main() -> int:
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", MODEL,
                               "--speculative_config", SPEC, "--kv_transfer_config", KV,
                               "--host", "127.0.0.1", "--port", str(PORT), "--max-model-len", "512"])
    try:
        while True:
            if server.poll() is not None:
                print("server died")
                return 1
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5)
                break
            except OSError:
                time.sleep(1)
        return subprocess.run(["speculators", "generate-offline-data", "--model", MODEL, "--endpoint",
                               f"http://127.0.0.1:{PORT}/v1", "--preprocessed-data", @DATA@,
                               "--output", "hidden_states", "--concurrency", "2"]).returncode
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
"""

FILES = {"script": ("run.sh", RUN_SH), "launcher": ("launch.py", LAUNCH_PY)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_job(lab: ServerLabPaths, kind: str, port: int | None = None) -> list[str]:
    """Write the ``kind`` job ("script" or "launcher") into the lab's work folder; the command that runs it."""
    name, template = FILES[kind]
    server = lab.server_command()
    quote = json.dumps if kind == "launcher" else str  # a Python literal, or a word the script quotes itself
    values = {"@MODEL@": quote(str(lab.model("tiny"))), "@PORT@": str(port or free_port()),
              "@DATA@": quote(str(lab.dataset)),
              "@SPEC@": quote(server[server.index("--speculative_config") + 1]),
              "@KV@": quote(server[server.index("--kv_transfer_config") + 1])}
    text = template
    for key, value in values.items():
        text = text.replace(key, value)
    Path(lab.work, name).write_text(text)
    return ["bash", name] if kind == "script" else ["python", name]
