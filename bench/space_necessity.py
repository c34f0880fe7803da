"""The necessity oracle: for a verified session, leave each kept change out in turn and run the job once more.

A file patch is taken off by applying its own diff backwards (zero fuzz, as medic applies it; at an offset when a
later patch of the same file moved its lines), an environment remedy or a command option by launching without it
and with every other kept one; the launch is medic's own (the same launcher, server and client for a server job)
with no scan, no canary, one launch, in approve mode — so a fault waits for a person instead of being repaired —
and what it writes is judged by the lab's own checker. A change the output verifies without is *needless*. The
change is put back before the next one is left out. A patch a later one edits inside (a member given to a stand-in it
carried in) comes off with the later patches of its files: the output failing without them shows it needed.
Host steps are not undone (the host keeps them).

Each run starts from no output (a client that skips the samples already written would find the verified session's
and do nothing), and the verified output is put back at the end for the lab's checker. A change is needless only
when the output verifies without it in each of NEEDLESS_RUNS runs: a fault that is a race (a file moved before its
writer let go) may not show in one, and one run that fails shows the change needed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config import Budgets, SessionConfig, Target
from agent.remedies import with_options
from tools.diffs import ArgEdit, EnvEdit, FileDiff, apply_hunks, diff_lines, parse_diff
from tools.errors import StaleContext

NEEDLESS_RUNS = 3
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


def rewrite_files(files: list[dict[str, Any]], forward: bool) -> None:
    for f in files:
        path = Path(f["path"])
        diff = f["diff"] if forward else backwards(f["diff"])
        for file_diff in parse_diff(diff).values():
            text = path.read_text()
            try:
                path.write_text(apply_hunks(text, file_diff))
            except StaleContext:  # a later patch of the same file moved its lines: they may stand elsewhere
                path.write_text(apply_hunks(text, at_offset(text, file_diff)))


def at_offset(text: str, diff: FileDiff) -> FileDiff:
    """The hunks moved to where their lines stand now, each where they stand exactly once (an offset, no fuzz)."""
    lines = diff_lines(text)
    moved = []
    for hunk in diff.hunks:
        size = len(hunk.source_lines)
        found = [i for i in range(len(lines) - size + 1) if lines[i:i + size] == list(hunk.source_lines)]
        if len(found) != 1:
            raise StaleContext(f"{diff.path}: a hunk's lines stand {len(found)} times in the file, not once")
        moved.append(dataclasses.replace(hunk, source_start=found[0] + 1 if hunk.source_length else found[0]))
    return dataclasses.replace(diff, hunks=tuple(moved))


def leave_each_out(config: SessionConfig, kept: list[dict[str, Any]], judged_ok: Callable[[], bool],
                   output: Path | None = None) -> dict[str, Any]:
    """``kept``: the session's kept patches (state["patches"]); ``judged_ok()``: the lab's checker on ``output``
    (the job's output file or folder). Returns {"needless": [ids], "needed": [ids], "unknown": {id: why}}."""
    if output is None:
        return each_left_out(config, kept, judged_ok, None)
    aside = output.with_name(output.name + ".verified")
    remove(aside)
    if output.exists():
        os.replace(output, aside)
    try:
        return each_left_out(config, kept, judged_ok, output)
    finally:
        if aside.exists():
            remove(output)
            os.replace(aside, output)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def each_left_out(config: SessionConfig, kept: list[dict[str, Any]], judged_ok: Callable[[], bool],
                  output: Path | None) -> dict[str, Any]:
    verdict: dict[str, Any] = {"needless": [], "needed": [], "unknown": {}, "with": {}}
    for entry in kept:
        patch = entry["patch"]
        pid = patch["id"]
        if not files_of(entry) and not patch.get("env") and not patch.get("args"):
            verdict["unknown"][pid] = "a host step: the host keeps it"
            continue
        group = take_off(kept, entry)
        if isinstance(group, str):
            verdict["unknown"][pid] = f"its diff does not come off, alone or with the later patches of its files: " \
                                      f"{group}"
            continue
        if len(group) > 1:  # later patches rest on its lines: they come off with it (nothing of theirs stands alone)
            verdict["with"][pid] = [g["patch"]["id"] for g in group if g is not entry]
        target = target_without(config.target, kept, {g["patch"]["id"] for g in group})
        try:
            needless = all(verified_without(config, target, f"{config.session_id}-without-{pid[:8]}"
                                            + (f"-{n}" if n else ""), judged_ok, output)
                           for n in range(NEEDLESS_RUNS))  # all() stops at the first run that fails
        finally:
            for taken in reversed(group):
                rewrite_files(files_of(taken), forward=True)
        verdict["needless" if needless else "needed"].append(pid)
    return verdict


def verified_without(config: SessionConfig, target: Target, session: str, judged_ok: Callable[[], bool],
                     output: Path | None) -> bool:
    """One launch of ``target`` (the kept changes but those left out) from no output, judged by the checker."""
    from agent.cli.stop import left_running
    from agent.session import run_session
    from tools import runs
    from tools.host import LocalHost

    if output is not None:
        remove(output)
    probe = config.model_copy(update={"session_id": session, "target": target, "scan": False, "canary": False,
                                      "mode": "approve", "budgets": Budgets(max_launches=1, max_wall=1800.0)})
    try:
        outcome, _ = run_session(probe)
    finally:  # a server kept loaded for the person's answer ends here
        trace = Path(config.traces_dir) / f"{session}.jsonl"
        left = left_running(trace) if trace.exists() else []
        runs.stop_all(LocalHost(), [runs.Run.in_dir(run.run_dir) for run in left])
    return outcome == "verified" and bool(judged_ok())


def take_off(kept: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]] | str:
    """Take ``entry``'s files off: alone, else with every later kept patch of the same files (latest first; they may
    rest on its lines, and without it they have nothing to stand on: the output failing without the group shows it
    needed). The patches taken off, latest first; or why they would not come off (all put back)."""
    paths = {f["path"] for f in files_of(entry)}
    later = [k for k in kept[kept.index(entry) + 1:] if paths & {f["path"] for f in files_of(k)}]
    groups = [[entry], [*reversed(later), entry]] if later else [[entry]]
    why = ""
    for group in groups:
        done: list[dict[str, Any]] = []
        try:
            for taken in group:
                rewrite_files(files_of(taken), forward=False)
                done.append(taken)
            return group
        except Exception as err:  # any reason it does not apply is the answer
            why = str(err)
            for taken in reversed(done):
                rewrite_files(files_of(taken), forward=True)
    return why


def files_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A kept patch's file edits (none for an env remedy, an option or a host step)."""
    return list(entry["patch"].get("files") or [])


def target_without(target: Target, kept: list[dict[str, Any]], pids: set[str]) -> Target:
    """The job as medic last launched it, less the kept changes ``pids``: every other env remedy in its environment,
    every other option on its commands (the file patches are on disk)."""
    others = [k["patch"] for k in kept if k["patch"]["id"] not in pids]
    env = [EnvEdit.model_validate(e) for p in others for e in p.get("env") or []]
    args = [ArgEdit.model_validate(a) for p in others for a in p.get("args") or []]
    server = with_options(target.server_command or [], [a for a in args if a.command == "server"])
    return target.model_copy(update={"env": {**target.env, **_env_values(env)},
                                     "command": with_options(target.command, [a for a in args if a.command == "job"]),
                                     "server_command": server or None})


def _env_values(edits: list[EnvEdit]) -> dict[str, str]:
    """The other kept env remedies as values for the job's env (a prepend goes before what the job has)."""
    env: dict[str, str] = {}
    for edit in edits:
        if edit.action == "set":
            env[edit.var] = edit.value
        elif edit.action == "prepend" and edit.value:
            env[edit.var] = f"{edit.value}:{env[edit.var]}" if env.get(edit.var) else edit.value
    return env
