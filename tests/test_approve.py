"""Approve mode end to end: the real SQLite checkpointer, a real (tiny, fake) target, answers from fresh processes.

The target: a venv whose site-packages hold ``fakelib`` (compute(x, *, mode)) and ``fakecaller``, which still
passes ``legacy=True``; medic's derived ``unexpected_kwarg`` repair drops it. The validator checks out.txt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.answers import LAUNCH_QUESTION
from agent.cli.approve import read_session, status_line
from agent.policy import Policy, decide, load_policy, policy_answer
from agent.readers.postmortem import postmortem_markdown
from agent.readers.postmortem_html import postmortem_html
from agent.readers.replay import replay
from agent.readers.tracefile import read_trace
from agent.session import run_session
from tests.fixtures_fake import CALLER, Fake, MakeFake
from tools.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
CLI = """
import sys, typer
from agent.cli import approve as cli_approve
from agent.cli import policy_check as cli_policy_check
from tools.errors import MedicError
app = typer.Typer(pretty_exceptions_enable=False)
app.command()(cli_approve.approve)
app.command()(cli_approve.sessions)
app.command("policy-check")(cli_policy_check.policy_check)
try:
    app()
except MedicError as err:
    print(f"medic: {err}", file=sys.stderr)
    sys.exit(err.exit_code)
"""
AGENT = """
import sys, time
from agent.session import run_session
from agent.session_files import load_config
print(run_session(load_config(sys.argv[1]))[0], flush=True)
time.sleep(600)  # a medic that lingers while it waits: the test kills it
"""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The approve CLI in a fresh process, with no terminal (stdin is /dev/null)."""
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=REPO, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, timeout=180)


def wait_for_approval(fake: Fake) -> dict[str, Any]:
    outcome, values = run_session(fake.config)
    assert outcome == "waiting"
    assert values["proposal"]["origin"] == "derived:unexpected_kwarg:drop"
    assert fake.caller.read_text() == CALLER  # nothing is written before a person answers
    return dict(values["proposal"])


def editor(tmp_path: Path, old: str, new: str) -> dict[str, str]:
    """$EDITOR: a script that rewrites the diff it is given."""
    script = tmp_path / "edit.py"
    script.write_text(f"import sys, pathlib\np = pathlib.Path(sys.argv[1])\n"
                      f"p.write_text(p.read_text().replace({old!r}, {new!r}))\n")
    return {"EDITOR": f"{sys.executable} {script}", "VISUAL": ""}


# (a) -----------------------------------------------------------------------------------------------------
def test_waits_then_approval_from_a_fresh_process_verifies(fake: Fake) -> None:
    proposal = wait_for_approval(fake)
    pid = proposal["patch"]["id"]
    paused = replay(fake.trace_path)  # a postmortem of the waiting session: every decision so far, then the pause
    assert paused.first_divergence is None and paused.waits and paused.exact_to_its_pause and not paused.exact
    listed = cli("sessions")
    assert listed.returncode == 0, listed.stderr
    assert f"waiting: patch {pid} (derived:unexpected_kwarg:drop)" in listed.stdout
    done = cli("approve", "s1", pid, "--yes")
    assert done.returncode == 0, done.stderr
    assert "legacy" not in fake.caller.read_text()
    answers = fake.events("approval_answer")
    assert [(a["action"], a["patch_id"]) for a in answers] == [("approve", pid)] and answers[0]["by"]
    assert fake.events("exit")[-1]["outcome"] == "verified"
    assert "verified" in cli("sessions").stdout
    again = cli("approve", "s1", "--yes")  # nothing waits any more
    assert again.returncode == 2 and "is not waiting for an approval (verified)" in again.stderr


# (b) -----------------------------------------------------------------------------------------------------
def test_reject_with_reason_ends_rejected_with_the_answer_in_the_report(fake: Fake) -> None:
    pid = wait_for_approval(fake)["patch"]["id"]
    done = cli("approve", "s1", "--reject", "I fix it upstream")
    assert done.returncode == 7, done.stderr  # rejected: a person's no ended it, not a failed repair (no_repair, 4)
    assert fake.caller.read_text() == CALLER
    (answer,) = fake.events("approval_answer")
    assert (answer["patch_id"], answer["action"], answer["reason"]) == (pid, "reject", "I fix it upstream")
    assert answer["by"] and answer["question"] == "approve_patch" and "legacy=True" in answer["diff"]
    (none,) = fake.events("no_repair")
    assert none["why"] == f"a person rejected patch {pid} (I fix it upstream)" and "failed" not in none["why"]
    assert fake.events("exit")[-1]["outcome"] == "rejected"
    report = (Path(os.environ["MEDIC_HOME"]) / "sessions" / "s1" / "report.md").read_text()
    asked = report.split("## Questions and answers", 1)[1]
    assert f"(patch `{pid}`)" in asked and f"**reject** by {answer['by']}: I fix it upstream" in asked
    assert "-    return fakelib.compute(x, mode='a', legacy=True)" in asked  # the diff answered
    assert replay(fake.trace_path).first_divergence is None


# (c) -----------------------------------------------------------------------------------------------------
def test_edited_diff_is_validated_applied_and_verified(fake: Fake) -> None:
    pid = wait_for_approval(fake)["patch"]["id"]
    env = editor(fake.root, "+    return fakelib.compute(x, mode='a')", '+    return fakelib.compute(x, mode="a")')
    done = cli("approve", "s1", "--edit", env=env)
    assert done.returncode == 0, done.stderr
    assert 'fakelib.compute(x, mode="a")\n' in fake.caller.read_text()
    applied = fake.events("applied")
    assert len(applied) == 1 and applied[0]["patch_id"] != pid and applied[0]["origin"].endswith("+edited")
    assert fake.events("exit")[-1]["outcome"] == "verified"


def test_edited_diff_that_does_not_apply_is_refused_and_the_patch_waits(fake: Fake) -> None:
    pid = wait_for_approval(fake)["patch"]["id"]
    done = cli("approve", "s1", "--edit", env=editor(fake.root, " def run(x):", " def run(y):"))
    assert done.returncode == 2
    assert "the edited diff was refused" in done.stderr and f"patch {pid} still waits" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert fake.caller.read_text() == CALLER and not fake.events("approval_answer")
    assert f"waiting: patch {pid}" in cli("sessions").stdout


# (d) -----------------------------------------------------------------------------------------------------
def test_agent_killed_while_waiting_then_a_fresh_process_completes(fake: Fake) -> None:
    agent = subprocess.Popen([sys.executable, "-c", AGENT, "s1"], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == "waiting"
        os.kill(agent.pid, signal.SIGKILL)
    finally:
        agent.kill()
        agent.wait(timeout=30)
    assert agent.returncode == -signal.SIGKILL
    done = cli("approve", "s1", "--yes")
    assert done.returncode == 0, done.stderr
    assert fake.events("exit")[-1]["outcome"] == "verified"


# (e) -----------------------------------------------------------------------------------------------------
def test_stale_approval_is_refused_and_nothing_is_written(fake: Fake) -> None:
    pid = wait_for_approval(fake)["patch"]["id"]
    changed = CALLER + "# edited by someone else\n"
    fake.caller.write_text(changed)
    done = cli("approve", "s1", "--yes")
    assert done.returncode == 2
    assert f"patch {pid} of session s1 is stale" in done.stderr and "nothing was written" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert fake.caller.read_text() == changed
    assert not Path(fake.config.ledger_dir).exists() and not fake.events("approval_answer")
    assert f"waiting: patch {pid}" in cli("sessions").stdout


def test_stale_inside_the_graph_keeps_the_patch_pending_and_a_later_answer_counts(fake: Fake) -> None:
    """The race the CLI check cannot close: the graph refuses too, and the next answer is not shadowed."""
    pid = wait_for_approval(fake)["patch"]["id"]
    fake.caller.write_text(CALLER + "# moved on\n")
    outcome, values = run_session(fake.config, resume={"action": "approve", "by": "t"})
    assert outcome == "waiting" and values["proposal"]["patch"]["id"] == pid
    assert fake.events("approval_refused")[0]["why"].startswith("stale: ")
    fake.caller.write_text(CALLER)
    outcome, _ = run_session(fake.config, resume={"action": "reject", "reason": "second answer", "by": "t2"})
    assert outcome == "rejected"  # the reject was heard, not the stale approve before it
    assert [a["by"] for a in fake.events("approval_answer")] == ["t2"]


def test_an_approval_waiting_in_an_older_checkpoint_is_answered_after_an_upgrade(
        fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Launch records checkpointed by a medic whose records did not name their launcher: the resumed session
    gives them one, and the answer goes through as it would have."""
    from agent.launchers.detached import DetachedLauncher

    start = DetachedLauncher.start

    def older_start(self: DetachedLauncher, *args: Any, **kwargs: Any) -> dict[str, Any]:
        update = start(self, *args, **kwargs)
        old = [{k: v for k, v in r.items() if k != "launcher"} for r in update["launches"]]
        return {**update, "launches": old, "run": old[-1]}

    monkeypatch.setattr(DetachedLauncher, "start", older_start)
    pid = wait_for_approval(fake)["patch"]["id"]
    monkeypatch.setattr(DetachedLauncher, "start", start)
    outcome, values = run_session(fake.config, resume={"action": "approve", "by": "t"})
    assert outcome == "verified", values.get("outcome_detail")
    assert [a["patch_id"] for a in fake.events("approval_answer")] == [pid]
    assert [r["launcher"] for r in values["launches"]] == ["detached", "detached"]


# (f) -----------------------------------------------------------------------------------------------------
def test_unknown_session_or_patch_exits_2_with_one_line(fake: Fake) -> None:
    nobody = cli("approve", "nosuch", "--yes")
    assert nobody.returncode == 2 and "no session 'nosuch'" in nobody.stderr
    pid = wait_for_approval(fake)["patch"]["id"]
    wrong = cli("approve", "s1", "deadbeefdeadbeef", "--yes")
    assert wrong.returncode == 2
    assert f"session s1 waits for patch {pid}, not 'deadbeefdeadbeef'" in wrong.stderr
    no_tty = cli("approve", "s1")
    assert no_tty.returncode == 2 and "no terminal to ask at" in no_tty.stderr
    both = cli("approve", "s1", "--yes", "--reject", "x")
    assert both.returncode == 2 and "one answer each" in both.stderr
    for run in (nobody, wrong, no_tty, both):
        assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert fake.caller.read_text() == CALLER


# (g) -----------------------------------------------------------------------------------------------------
SITE = "/env/lib/python3.11/site-packages"


def proposal(origin: str, *paths: str) -> dict[str, Any]:
    return {"origin": origin, "patch": {"id": "p1", "files": [{"path": p} for p in paths]}}


POLICY = Policy.model_validate({"rules": [
    {"name": "kwargs", "action": "allow", "kind": "derived:unexpected_kwarg:*", "package": "speculators"},
    {"name": "no-llm-in-vllm", "action": "deny", "kind": "llm", "package": ["vllm", "vllm_*"]},
    {"name": "no-config", "action": "deny", "file": "*/config.py"},
]})


def test_policy_allows_one_kind_and_asks_for_another() -> None:
    spec = f"{SITE}/speculators/models/eagle3.py"
    assert decide(POLICY, proposal("derived:unexpected_kwarg:drop", spec))[1].name == "kwargs"  # type: ignore[union-attr]
    assert decide(POLICY, proposal("derived:unexpected_kwarg:rename", spec))[0] == "allow"
    assert decide(POLICY, proposal("derived:missing_argument", spec)) == ("ask", None)
    assert decide(POLICY, proposal("playbook:rope", spec)) == ("ask", None)
    assert decide(POLICY, proposal("llm", f"{SITE}/vllm/worker.py"))[0] == "deny"
    assert decide(POLICY, proposal("llm", spec))[0] == "ask"
    # deny wins over allow; an allow must cover every file, a deny needs only one
    decision, rule = decide(POLICY, proposal("derived:unexpected_kwarg:drop", f"{SITE}/speculators/config.py"))
    assert (decision, rule and rule.name) == ("deny", "no-config")
    assert decide(POLICY, proposal("derived:unexpected_kwarg:drop", spec, "/work/driver.py"))[0] == "ask"
    assert decide(Policy(), proposal("llm", spec)) == ("ask", None)


def test_policy_answer_and_bad_files(tmp_path: Path, fake: Fake) -> None:
    good = tmp_path / "policy.yaml"
    good.write_text("rules:\n  - name: kwargs\n    action: allow\n    kind: 'derived:unexpected_kwarg:*'\n"
                    "  - name: no-llm\n    action: deny\n    kind: llm\n")
    config = fake.config.model_copy(update={"policy_file": str(good)})
    spec = f"{SITE}/speculators/x.py"
    assert policy_answer(config, proposal("derived:unexpected_kwarg:drop", spec)) == {
        "action": "approve", "by": "policy:kwargs", "reason": "allowed by policy rule kwargs"}
    assert policy_answer(config, proposal("llm", spec)) == {
        "action": "reject", "by": "policy", "reason": "denied by policy rule no-llm"}
    assert policy_answer(config, proposal("playbook:x", spec)) is None
    assert policy_answer(fake.config, proposal("llm", spec)) is None  # no policy file: always ask
    toml = tmp_path / "policy.toml"
    toml.write_text('[[rules]]\nname = "k"\naction = "allow"\nkind = "playbook:*"\n')
    assert load_policy(toml).rules[0].kind == ["playbook:*"]
    for text, expected in [
        ("rules:\n  - name: x\n    action: maybe\n", "rules.0.action"),
        ("rules:\n  - name: x\n    action: allow\n    kinds: llm\n", "rules.0.kinds: Extra inputs"),
        ("rules:\n  - name: x\n    action: allow\n    file: 'speculators/*.py'\n", "absolute or starts with"),
        ("rules:\n  - {name: x, action: allow}\n  - {name: x, action: deny}\n", "two rules are named 'x'"),
        ("rules: [\n", "not valid YAML"),
        ("- just a list\n", "a mapping with a `rules:` list"),
    ]:
        good.write_text(text)
        with pytest.raises(UsageError, match=expected) as err:
            load_policy(good)
        assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match="cannot read the policy"):
        load_policy(tmp_path / "missing.yaml")


def test_policy_check_shows_the_rule_for_each_patch_of_a_session(tmp_path: Path, fake: Fake) -> None:
    from agent.cli import policy_check as cli_policy_check

    pid = wait_for_approval(fake)["patch"]["id"]
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - name: kwargs\n    action: allow\n    kind: 'derived:unexpected_kwarg:*'\n"
                      "    package: fakecaller\n")
    import typer

    app = typer.Typer()
    app.command()(cli_policy_check.policy_check)
    result = CliRunner().invoke(app, [str(policy), "--session", "s1"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if pid in line)
    assert "fakecaller" in row and "allow" in row and "kwargs" in row


# (h) a person's no to the scan's repair --------------------------------------------------------------------
SCANNED = "from fakelib import compute\n\n\ndef run(x):\n    return compute(x, mode='a', legacy=True)\n"


def scan_finds_the_drift(make_fake: MakeFake) -> Fake:
    """The fake whose caller calls a name imported from fakelib: the scan proves the call raises before a launch."""
    fake = make_fake(scan=True)
    fake.caller.write_text(SCANNED)
    outcome, values = run_session(fake.config)
    assert outcome == "waiting" and values["fault"]["stage"] == "scan"
    return fake


def test_a_rejected_scan_repair_asks_before_launching_into_its_fault_and_is_never_proposed_again(
        make_fake: MakeFake) -> None:
    fake = scan_finds_the_drift(make_fake)
    pid = fake.events("candidate")[0]["patch_id"]
    outcome, _ = run_session(fake.config, resume={"action": "reject", "reason": "not this way", "by": "ann"})
    assert outcome == "waiting"  # asked, not launched
    assert "launch" not in fake.kinds() and fake.caller.read_text() == SCANNED
    assert status_line(*read_session("s1")) == f"waiting: {LAUNCH_QUESTION} (patch {pid})"  # `medic sessions`
    yes = cli("approve", "s1", "--yes")  # "yes" would be ambiguous here: one line, nothing answered
    assert yes.returncode == 2 and "pass --launch, --edit or --reject REASON" in yes.stderr
    assert len(yes.stderr.strip().splitlines()) == 1
    done = cli("approve", "s1", "--launch")
    assert done.returncode == 7, done.stderr  # the crash's only repair is the diff rejected: a person's no ends it
    assert fake.kinds().count("launch") == 1 and len(fake.events("candidate")) == 1  # never proposed again
    (again,) = fake.events("not_proposed")
    assert again["same_as"] == pid
    answers = fake.events("approval_answer")
    assert [(a["question"], a["action"]) for a in answers] == [("approve_patch", "reject"),
                                                                ("launch_into_fault", "launch")]
    assert fake.events("exit")[-1]["outcome"] == "rejected"
    report = (Path(os.environ["MEDIC_HOME"]) / "sessions" / "s1" / "report.md").read_text()
    assert "not this way" in report and f"{LAUNCH_QUESTION} (patch `{pid}`)" in report and "**launch** by" in report
    post = postmortem_markdown(read_trace(fake.trace_path))
    asked = post.split("## Questions and answers", 1)[1]
    assert "**reject** by" in asked and "**launch** by" in asked and "not this way" in asked
    crash = next(line for line in post.splitlines() if line.startswith("2. [crash]"))
    assert "chosen by" in crash and "after the scan's repair for it was rejected" in crash
    assert "a crash" not in crash  # the load a person chose is not charged as a crash medic could not prevent
    assert f"{pid} — derived:unexpected_kwarg:drop for fault 1: rejected" in post
    page = postmortem_html(read_trace(fake.trace_path))
    assert "<h2>Questions and answers</h2>" in page and "launch by " in page
    assert replay(fake.trace_path).first_divergence is None


def test_stop_at_the_launch_question_ends_rejected_before_any_launch(make_fake: MakeFake) -> None:
    fake = scan_finds_the_drift(make_fake)
    outcome, values = run_session(fake.config, resume={"action": "reject", "reason": "no", "by": "ann"})
    assert outcome == "waiting" and values["proposal"]["question"] == "launch_into_fault"
    outcome, values = run_session(fake.config, resume={"action": "reject", "reason": "fix upstream", "by": "ann"})
    assert outcome == "rejected" and "ann said stop (fix upstream)" in values["outcome_detail"]
    assert "launch" not in fake.kinds() and fake.caller.read_text() == SCANNED
    assert [a["action"] for a in values["answers"]] == ["reject", "reject"]
    assert replay(fake.trace_path).first_divergence is None


def test_an_edit_at_the_launch_question_is_applied_and_verified(make_fake: MakeFake) -> None:
    fake = scan_finds_the_drift(make_fake)
    _, values = run_session(fake.config, resume={"action": "reject", "reason": "no", "by": "ann"})
    diff = values["proposal"]["patch"]["files"][0]["diff"].replace("compute(x, mode='a')", 'compute(x, mode="a")')
    outcome, values = run_session(fake.config, resume={"action": "edit", "diff": diff, "by": "ann"})
    assert outcome == "verified", values.get("outcome_detail")
    assert 'compute(x, mode="a")' in fake.caller.read_text() and fake.kinds().count("launch") == 1
    assert replay(fake.trace_path).first_divergence is None
