"""medic's own probes (the import probe in the target env, and every other command it runs on this machine) end
with medic, whether it is stopped with Ctrl-C or killed with `kill -9`; and a slow check during the load never
holds up reading the log (issue 34, item 4). Real processes: a medic-side Python that runs a probe, a real
detached launch of the fake target."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.nodes.launch import launch
from agent.nodes.watch import watch
from agent.session import make_deps
from agent.state import SessionState
from tests.fixtures_fake import MakeFake

REPO = Path(__file__).resolve().parents[1]
# medic's side: a probe of the target env, as tools/envprobe.py and the import check run one (LocalHost.run)
MEDIC_RUNS_A_PROBE = """
import sys
from tools.host import LocalHost
probe = "import os, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)".replace("sys.argv[1]",
                                                                                                 repr(sys.argv[1]))
LocalHost().run([sys.executable, "-c", "import sys; " + probe], timeout=600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is left


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "sigint"])
def test_a_probe_ends_with_medic(tmp_path: Path, how: signal.Signals) -> None:
    pidfile = tmp_path / "probe.pid"
    medic = subprocess.Popen([sys.executable, "-c", MEDIC_RUNS_A_PROBE, str(pidfile)], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = 0
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        probe = int(pidfile.read_text())
        assert alive(probe)
        os.kill(medic.pid, how)
        medic.wait(timeout=30)
        gone = time.monotonic()
        while alive(probe) and time.monotonic() - gone < 5:
            time.sleep(0.05)
        outlived = time.monotonic() - gone
        assert not alive(probe), f"the probe outlived medic by more than {outlived:.1f}s (was > 12 s)"
        assert outlived < 1.5
    finally:
        if medic.poll() is None:
            medic.kill()
            medic.wait()
        if probe and alive(probe):
            os.kill(probe, signal.SIGKILL)


# the job's log: a phase a second for six seconds, while the check during the load takes three
SLOW_JOB = """import time
for line in ("starting", "Starting to load model fake", "GPU KV cache size: 100 tokens", "Adding requests",
             "Processed prompts: 50%", "Processed prompts: 100%"):
    print(line, flush=True)
    time.sleep(1.0)
"""


def test_a_slow_check_during_the_load_does_not_hold_up_the_log(make_fake: MakeFake) -> None:
    fake = make_fake(mode="unattended", session_id="beside", canary=False, save=False)
    (fake.work / "job.py").write_text(SLOW_JOB)
    (fake.site / "slowmod.py").write_text("import time\ntime.sleep(3)\n")
    config = fake.config.model_copy(update={"target": fake.config.target.model_copy(
        update={"command": [str(fake.python), "job.py"]})})
    deps = make_deps(config)
    state: SessionState = {"launches": [], "faults": [], "patches": [], "preflight": {},
                           "pending_checks": [{"kind": "import", "target": "slowmod", "detail": "",
                                               "when": "during_load", "patch_id": "p1"}]}
    try:
        state = {**state, **launch(state, deps)}  # type: ignore[typeddict-item]
        ended = watch(state, deps)
    finally:
        deps.trace.close()
    assert ended["run"]["outcome"] == "exited"
    events = fake.trace
    slow = next(e for e in events if e["kind"] == "check" and e["data"]["check"] == "import slowmod")
    kv = next(e for e in events if e["kind"] == "phase" and e["data"]["phase"] == "kv_cache")
    # the log's phases were read while the import ran (they waited for it: kv_cache came after the check)
    assert kv["ts"] < slow["ts"], (kv, slow)
    assert slow["data"]["ok"] and slow["data"]["when"] == "during_load"
