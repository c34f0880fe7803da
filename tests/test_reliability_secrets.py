"""10 planted secrets (medic's environment, Target.env, command arguments, config values, lines the job prints,
an exception message) must not appear in anything medic writes: the trace, the SQLite checkpoint db (its bytes,
WAL included), the report, and the prompt a model would get (agent/llm/prompts.py fault_message).
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.codec import fault_from_dict
from agent.llm.prompts import fault_message
from agent.session import checkpointer
from agent.session_files import load_config
from tests.fixtures_fake import MakeFake, medic_cli, record_figure

SECRETS = {
    "medic env OPENAI_API_KEY": "oa-live-7Qm2Zr9Kp4Wx8Ty1",
    "medic env HF_TOKEN": "hf_Zq8Wm3Xr7Tp2Kv9Ly4Nb6Jc1Hd5",
    "Target.env SERVICE_TOKEN": "svc-Xk29dLq81mZp",
    "Target.env WANDB_API_KEY": "wandb-93kfj2LqpZ8x",
    "argument --token=": "argtok-Pq7Lm2Zx9W",
    "argument --api-key VALUE": "argkey-Rt5Vn8Qw2Z",
    "config llm.api_key": "cfgkey-Mh3Jk8Lq1X",
    "log Authorization: Bearer": "bearer-Ux8Qz3Wm5Kp2Lr7",
    "log sk- key": "sk-Proj4Tq9Wz2Lm7Xc5Vb8Nk1",
    "log echo of Target.env secret": "svc-Xk29dLq81mZp",  # the job prints $SERVICE_TOKEN's value
}
PRELUDE = (f"Authorization: Bearer {SECRETS['log Authorization: Bearer']}\n"
           f"using key {SECRETS['log sk- key']}\n"
           f"service token is {SECRETS['Target.env SERVICE_TOKEN']}\n")


def places(fake_home: Path, trace: Path, session: str) -> dict[str, bytes]:
    """Every artefact medic wrote, as bytes."""
    found = {"trace": trace.read_bytes(), "report": (fake_home / "sessions" / session / "report.md").read_bytes()}
    for db in sorted(fake_home.glob("checkpoints.sqlite*")):
        found[f"checkpoint db {db.name}"] = db.read_bytes()
    return found


def where(blob: bytes, secret: str) -> list[str]:
    """Which JSON fields of a trace (or bytes offsets elsewhere) hold ``secret``."""
    hits = []
    for line in blob.decode("utf-8", "replace").splitlines():
        if secret in line:
            try:
                record = json.loads(line)
                keys = [k for k, v in (record.get("data") or record).items() if secret in json.dumps(v)]
                hits.append(f"{record.get('kind', 'header')}:{','.join(keys)}")
            except ValueError:
                hits.append(line[max(0, line.find(secret) - 60):][:120])
    return hits


def fields(value: object, secret: str, path: str = "") -> list[str]:
    """The paths inside the checkpointed state that hold ``secret``."""
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in fields(v, secret, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return sorted({hit for i, v in enumerate(value) for hit in fields(v, secret, f"{path}[{i}]")})
    return [path.lstrip(".")] if isinstance(value, str) and secret in value else []


def test_ten_planted_secrets_leak_nowhere(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", session_id="sec", prelude=PRELUDE,
                     env={"SERVICE_TOKEN": SECRETS["Target.env SERVICE_TOKEN"],
                          "WANDB_API_KEY": SECRETS["Target.env WANDB_API_KEY"]},
                     args=[f"--token={SECRETS['argument --token=']}", "--api-key", SECRETS["argument --api-key VALUE"]],
                     llm={"base_url": "http://127.0.0.1:9/v1", "model": "m",
                          "api_key": SECRETS["config llm.api_key"]})
    env = {"OPENAI_API_KEY": SECRETS["medic env OPENAI_API_KEY"], "HF_TOKEN": SECRETS["medic env HF_TOKEN"]}
    done = medic_cli("resume", "sec", env=env)
    assert done.returncode in (0, 4), done.stderr  # the LLM endpoint is dead; the derived repair needs none
    blobs = places(fake.home, fake.trace_path, "sec")
    # fixed (diagnose redacts): the job's log lines reach the checkpoint db (state fault.log_excerpt,
    # faults[].log_excerpt, from agent/nodes/diagnose.py) and fault_message unredacted; `--api-key VALUE` as two
    # argv words passes tools/redact.py into the trace (header config.target.command, launch.command) and
    # report.md (agent/record/report.py "target:" line).
    with checkpointer() as saver:
        values = saver.get_tuple({"configurable": {"thread_id": "sec"}})
    assert values is not None
    state = values.checkpoint["channel_values"]
    roots = state["preflight"]["roots"]
    prompts = [fault_message(fault_from_dict(state["fault"]), roots=roots, versions={})]
    blobs["prompt fault_message"] = "\n".join(prompts).encode()
    blobs["stdout/stderr of medic"] = (done.stdout + done.stderr).encode()
    leaks: dict[str, list[str]] = {}
    for name, secret in SECRETS.items():
        for place, blob in blobs.items():
            if secret.encode() in blob:
                detail = where(blob, secret) if place == "trace" else fields(state, secret) if "db" in place else ""
                leaks.setdefault(name, []).append(f"{place}: {detail}")
    record_figure("planted secrets", survived=len(SECRETS) - len(leaks), total=len(SECRETS),
                  secrets_leaked=len(leaks), leaks=json.dumps(leaks)[:2000])
    assert prompts and load_config("sec")
    assert leaks == {}, json.dumps(leaks, indent=1)
