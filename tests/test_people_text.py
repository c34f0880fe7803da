"""What a person reads: short paths, short signatures, rounded numbers, no word said twice — in the live view,
the report and the postmortem alike, while the trace keeps everything whole."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from agent.readers.postmortem import postmortem_markdown
from agent.readers.postmortem_html import postmortem_html
from agent.readers.tracefile import read_trace
from agent.record.people import Shortener, for_people, short_signatures, without_repeat, without_subject
from agent.record.view import View
from tests.fixtures_replay import replay_exempt

SITE = "/opt/envs/job/lib/python3.11/site-packages"
WORK = "/data/job"
PY = "/opt/envs/job/bin/python"
GEN = f"{SITE}/speculators/data_generation/vllm_hidden_states_generator.py"
SIGNATURE = ("vllm.config:SchedulerConfig(max_model_len, is_encoder_decoder, runner_type, max_num_batched_tokens, "
             "max_num_seqs, policy)")
VERDICT = (f"verified by `{PY} {WORK}/check.py {WORK}/out/hidden_states.pt`: 4 sequences, per-layer max abs "
           "error {'2': 0.0020738840103149414}")
SH = Shortener(workdir=WORK, python=PY)


def test_paths_read_as_the_package_path_or_the_workdir() -> None:
    assert SH.path(f"{GEN}:171") == "speculators/data_generation/vllm_hidden_states_generator.py:171"
    assert SH.text(f"compile {GEN}: ok, {WORK}/extract.py and {PY} x") == (
        "compile speculators/data_generation/vllm_hidden_states_generator.py: ok, <workdir>/extract.py and python x")
    assert SH.text("/data/jobs/other.py") == "/data/jobs/other.py"  # a sibling folder is not the workdir


def test_a_long_signature_keeps_what_the_check_is_about() -> None:
    short = short_signatures(SIGNATURE, ["is_encoder_decoder"])
    assert short == "vllm.config:SchedulerConfig(…, is_encoder_decoder, …)"
    assert short_signatures("f(a, b, c)") == "f(a, b, c)"  # short ones stay whole
    check = "signature_has vllm.config:SchedulerConfig is_encoder_decoder"
    assert without_subject(check, SIGNATURE).startswith("SchedulerConfig(max_model_len")


def test_numbers_rounded_and_no_word_twice() -> None:
    assert for_people(VERDICT, SH).endswith("{'2': 0.0021}")
    assert without_repeat("verified", VERDICT) == VERDICT
    assert without_repeat("budget", "3 launches spent") == "budget: 3 launches spent"


def write_trace(path: Path) -> Path:
    config = {"session_id": "s", "target": {"host": "local", "python": PY, "workdir": WORK,
                                            "command": [PY, f"{WORK}/extract.py"]}}
    events = [
        ("fault", {"stage": "scan", "summary": "TypeError: SchedulerConfig() missing 1 required positional argument",
                   "frames": [f"{GEN}:194 _create_vllm_config"]}),
        ("check", {"check": "signature_has vllm.config:SchedulerConfig is_encoder_decoder", "ok": True,
                   "detail": SIGNATURE, "when": "before"}),
        ("check", {"check": "import speculators.data_generation.custom_worker", "ok": True, "when": "during_load",
                   "detail": "speculators.data_generation.custom_worker imports in the target env"}),
        ("validate", {"summary": VERDICT, "verified": True}),
        ("exit", {"outcome": "verified", "detail": VERDICT}),
    ]
    lines = [{"format": "medic-trace", "version": 1, "ts": 1.0, "session": "s", "config": config}]
    lines += [{"ts": 2.0 + i, "kind": kind, "node": "n", "data": data} for i, (kind, data) in enumerate(events)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    replay_exempt(path, "a few events for the words people read, not a session")
    return path


def test_view_report_and_postmortem_say_it_the_short_way(tmp_path: Path) -> None:
    trace = read_trace(write_trace(tmp_path / "s.jsonl"))
    out = io.StringIO()
    view = View(Console(file=out, width=10_000, soft_wrap=True, color_system=None), shortener=SH)
    for event in trace.events:
        view.event(event.kind, event.node, event.data)
    lines = out.getvalue().splitlines()
    assert "at speculators/data_generation/vllm_hidden_states_generator.py:194" in lines[0]
    assert lines[1].endswith("ok SchedulerConfig(…, is_encoder_decoder, …)"), lines[1]
    assert lines[2].endswith(": ok imports in the target env"), lines[2]
    assert lines[-1] == "verified"  # the verdict is on the validate line just above: not said twice
    assert "{'2': 0.0021}" in lines[-2] and "python <workdir>/check.py" in lines[-2]
    for page in (postmortem_markdown(trace), postmortem_html(trace)):
        assert SITE not in page and "0.00207" not in page and "verified: verified" not in page
        assert "python <workdir>/check.py" in page.replace("&lt;", "<").replace("&gt;", ">")
        assert "is_encoder_decoder, …)" in page and "runner_type" not in page
    assert SITE in (tmp_path / "s.jsonl").read_text()  # the trace keeps the whole path
