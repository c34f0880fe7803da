"""Every message medic assembles reads as a sentence, names only options medic has, and claims only what the
session shows: the templates that join fragments (what medic could not find to check an output) rendered with
every combination of fragments, every option a hint in agent/ and tools/ names against medic's own commands, and
the postmortem's reloads-saved figure only where it means one."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest
import typer

from agent.cli.main import app
from agent.readers.postmortem_server import server_lines
from agent.readers.tracefile import Event, Trace
from tools.host import LocalHost
from tools.hs_job import hs_builtin_check
from tools.validate_output import builtin_check

ROOT = Path(__file__).resolve().parent.parent
# what fragments joined carelessly leave behind: "no the output file", ") (or a", " , ", doubled words
GARBLED = [re.compile(p) for p in (r"\b(?:no|a|an|the) (?:the|a|an)\b", r"\s{2}", r"\s[,.;:]", r"\)\s*\(",
                                   r"[,;:]\s*[,;:.]", r"\b(\w{2,}) \1\b")]
# where a message tells the reader which option to give: "(--output PATH names it)", "pass --python", "a --validate
# command"; the options of other programs a message quotes follow "the server's", "sbatch's" and so on
HINT = re.compile(r"(?:\(|\b(?:pass|give|with|a|or|use|add|and) )(--[a-z][a-z0-9_-]+)")


def garbled(text: str) -> list[str]:
    return [m.group(0) for pattern in GARBLED for m in pattern.finditer(text)]


def medic_options() -> set[str]:
    found: set[str] = set()
    stack = [typer.main.get_command(app)]  # a group of commands and groups (lab)
    while stack:
        command = stack.pop()
        found |= {o for p in command.params for o in [*p.opts, *p.secondary_opts]}
        stack += list(getattr(command, "commands", {}).values())
    return found


def test_every_option_a_hint_names_is_one_medic_has() -> None:
    options = medic_options()
    assert {"--output", "--canary-model", "--validate", "--server", "--python"} <= options
    wrong = []
    for path in sorted([*ROOT.glob("agent/**/*.py"), *ROOT.glob("tools/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value:
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno}: {option} in {node.value[:80]!r}"
                          for option in HINT.findall(node.value) if option not in options]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("output", "model"), list(itertools.product([None, "out.pt"], [None, "/models/tiny"]))[:3])
def test_what_medic_did_not_find_to_check_an_output_reads_as_a_sentence(tmp_path: Path, output: str | None,
                                                                         model: str | None) -> None:
    (tmp_path / "run.sh").write_text("vllm serve ./m &\nspeculators generate-offline-data\n")
    why = builtin_check(LocalHost(), "python", ["bash", "run.sh"], str(tmp_path), output=output, model_dir=model)
    assert isinstance(why, str)
    assert not garbled(why), (garbled(why), why)
    assert why.startswith("medic found ") and why.endswith("in `bash run.sh`")
    assert ("--output PATH" in why) == (output is None) and ("--canary-model DIR" in why) == (model is None)
    assert not [o for o in HINT.findall(why) if o not in medic_options()]


@pytest.mark.parametrize("have", [set(), {"model"}, {"dataset"}, {"model", "dataset"}])
@pytest.mark.parametrize("server", [None, ["vllm", "serve", "M"], ["vllm", "serve", "M", "--speculative_config", "{}"]])
def test_why_a_server_jobs_output_cannot_be_checked_reads_as_a_sentence(tmp_path: Path, have: set[str],
                                                                        server: list[str] | None) -> None:
    model, dataset = tmp_path / "M", tmp_path / "data"
    if "model" in have:
        model.mkdir()
        (model / "config.json").write_text('{"num_hidden_layers": 2}')
    if "dataset" in have:
        dataset.mkdir()
    client = ["speculators", "generate-offline-data", "--model", str(model), "--preprocessed-data", str(dataset)]
    why = hs_builtin_check(LocalHost(), "python", client, str(tmp_path), server_command=server)
    assert isinstance(why, str)
    assert not garbled(why), (garbled(why), why)
    assert why.endswith("A --validate command would check it instead")
    assert ("--server names it" in why) == (server is None)
    assert not [o for o in HINT.findall(why) if o not in medic_options()]


def trace(*events: tuple[str, dict[str, object]]) -> Trace:
    return Trace(Path("s.jsonl"), {"ts": 0.0, "config": {"target": {"server_command": ["vllm", "serve", "M"]}}},
                 [Event(i + 2, float(i), kind, "n", data) for i, (kind, data) in enumerate(events)])


SCANNED = (("fault", {"stage": "scan"}), ("fault", {"stage": "scan"}),
           ("server", {"event": "started", "n": 1}), ("server", {"event": "ready", "n": 1, "port": 1, "pid": 2}))


def test_no_reloads_saved_for_a_session_that_loaded_once_and_fixed_nothing_after() -> None:
    # Gemma 3: two faults the scan fixed, one load, the stop
    lines = server_lines(trace(*SCANNED, ("launch", {"kind": "target"}), ("fault", {"stage": "crash"}),
                               ("exit", {"outcome": "no_repair"})))
    assert "saved" in lines[1] and not re.search(r"\d+ reload\(s\) saved", lines[1]), lines[1]
    assert not garbled(lines[1])


@pytest.mark.parametrize("end", [
    (("launch", {"kind": "target"}), ("exit", {"outcome": "verified"})),
    # a client-side fix ran against the loaded server, then the session stopped
    (("launch", {"kind": "target"}), ("fault", {"stage": "crash"}), ("launch", {"kind": "target"}),
     ("exit", {"outcome": "no_repair"})),
])
def test_reloads_saved_where_they_mean_one(end: tuple[tuple[str, dict[str, object]], ...]) -> None:
    lines = server_lines(trace(*SCANNED, *end))
    assert re.search(r"[1-9] reload\(s\) saved", lines[1]), lines[1]
