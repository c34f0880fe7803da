"""The necessity oracle: for a verified session, leave each kept change out in turn and run the job once more.

A file patch is taken off by applying its own diff backwards (zero fuzz, as medic applies it), an environment
remedy by launching without it; the launch is medic's own (the same launcher, server and client for a server job)
with no scan, no canary, one launch, in approve mode — so a fault waits for a person instead of being repaired —
and what it writes is judged by the lab's own checker. A change the output verifies without is *needless*. The
change is put back before the next one is left out. Host steps are not undone (the host keeps them).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agent.config import Budgets, SessionConfig
from tools.diffs import EnvEdit, apply_hunks, parse_diff

HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")


def backwards(diff: str) -> str:
    """The unified diff that undoes ``diff``: its sides swapped."""
    out = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("--- "):
            out.append("+++ " + line[4:])
        elif line.startswith("+++ "):
            out.append("--- " + line[4:])
        elif (m := HUNK.match(line.rstrip("\n"))):
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}\n")
        elif line.startswith("-"):
            out.append("+" + line[1:])
        elif line.startswith("+"):
            out.append("-" + line[1:])
        else:
            out.append(line)
    # unidiff wants the "---" header first: the swap above put "+++" before it
    text = "".join(out)
    return re.sub(r"^(\+\+\+ [^\n]*\n)(--- [^\n]*\n)", r"\2\1", text, flags=re.M)


def _rewrite(files: list[dict[str, Any]], forward: bool) -> None:
    for f in files:
        path = Path(f["path"])
        diff = f["diff"] if forward else backwards(f["diff"])
        for file_diff in parse_diff(diff).values():
            path.write_text(apply_hunks(path.read_text(), file_diff))


def leave_each_out(config: SessionConfig, kept: list[dict[str, Any]], judged_ok: Any) -> dict[str, Any]:
    """``kept``: the session's kept patches (state["patches"]); ``judged_ok()``: the lab's checker on the output.
    Returns {"needless": [ids], "needed": [ids], "unknown": {id: why}}."""
    from agent.cli.stop import left_running
    from agent.session import run_session
    from tools import runs
    from tools.host import LocalHost

    verdict: dict[str, Any] = {"needless": [], "needed": [], "unknown": {}}
    for entry in kept:
        patch = entry["patch"]
        pid, files, env = patch["id"], list(patch.get("files") or []), list(patch.get("env") or [])
        if not files and not env:
            verdict["unknown"][pid] = "a host step: the host keeps it"
            continue
        others = [EnvEdit.model_validate(e) for k in kept if k["patch"]["id"] != pid
                  for e in k["patch"].get("env") or []]
        try:
            _rewrite(files, forward=False)
        except Exception as err:  # a later patch stacked on the same lines: cannot be taken off alone
            verdict["unknown"][pid] = f"its diff does not come off alone: {err}"
            continue
        session = f"{config.session_id}-without-{pid[:8]}"
        target = config.target.model_copy(update={"env": {**config.target.env, **_env_values(others)}})
        probe = config.model_copy(update={"session_id": session, "target": target, "scan": False, "canary": False,
                                          "mode": "approve", "budgets": Budgets(max_launches=1, max_wall=1800.0)})
        try:
            outcome, _ = run_session(probe)
        finally:  # a server kept loaded for the person's answer ends here
            trace = Path(config.traces_dir) / f"{session}.jsonl"
            left = left_running(trace) if trace.exists() else []
            runs.stop_all(LocalHost(), [runs.Run.in_dir(run.run_dir) for run in left])
            _rewrite(files, forward=True)
        needless = outcome == "verified" and bool(judged_ok())
        verdict["needless" if needless else "needed"].append(pid)
    return verdict


def _env_values(edits: list[EnvEdit]) -> dict[str, str]:
    """The other kept env remedies as values for the job's env (a prepend goes before what the job has)."""
    env: dict[str, str] = {}
    for edit in edits:
        if edit.action == "set":
            env[edit.var] = edit.value
        elif edit.action == "prepend" and edit.value:
            env[edit.var] = f"{edit.value}:{env[edit.var]}" if env.get(edit.var) else edit.value
    return env
