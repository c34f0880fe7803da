"""Judging an output: exit code 0 is a claim, not a result. The validator decides.

The validator is the user's ``--validate`` command or, without one, medic's own check (tools/validate_output.py:
layer counts and shapes of every saved sequence, values of a sample against an fp32 HF forward pass, run by the
target python on the output and model folder the job's command line names; for a speculators ≥ 0.5 client, its
folder of safetensors records, with the layer ids from the server's command: tools/hs_job.py). Any failure of
either, a plain non-zero exit too, is a Fault (stage ``validate``) whose evidence is the validator's own output,
the lines that say what failed first; it names the fixable files the driver reaches, since a clean run has no
traceback to point at. Only an output the validator cannot read at all (its report says ``readable: false``, or it
exits 2 without a report, as argparse and the lab's check do) or one nothing can check leaves the job "unverified".

A sharded session (a Slurm job array, or detached shard runs) checks every shard a launch ran on its own (the
command's and the validator's ``{shard}`` is its index, ``MEDIC_SHARD`` too); a verified shard is never run again.
The session is verified only once every shard is; the first shard whose output is wrong is the fault, like any
other. The validate node and the launch node (before a relaunch) both judge through here.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, replace
from functools import partial
from typing import Any, cast

from agent.config import SessionConfig
from agent.deps import Deps
from agent.faults import answered_fault, model_patch_newest, not_found_fault, record_fault
from agent.job import (
    canary_commands,
    canary_env,
    driver_path,
    in_target_env,
    job_model_folder,
    seen_through,
    where_looked,
)
from agent.job_words import said_in_log
from agent.launch_records import DetachedLaunch, LaunchRecord
from agent.launchers.beside import stop_beside
from agent.repair.scan import scan_files
from agent.repair.types import Fault, FrameRef, OutputFacts
from agent.shards import total
from agent.state import SessionState, ValidationReport
from agent.wrong_output import to_set_aside
from tools import env_scripts
from tools.errors import MedicError, RunError
from tools.host import CommandResult, Host
from tools.runs import Run
from tools.slurm import SHARD_PLACEHOLDER, with_shard
from tools.validate_output import builtin_check, evidence_lines, failing_lines, locate

VALIDATE_TIMEOUT = 1800.0
CANNOT_READ = 2  # the exit code of a validator that could not read the output (argparse's usage error too)


def validate_output(state: SessionState, deps: Deps) -> dict[str, Any]:
    """One output (a plain job's, the canary's, or one shard's) judged: the state update that says so."""
    target, run = seen_through(deps.config.target, state), state.get("run")  # a wrapper: its client and server
    launch, canary = (run["n"], run["kind"] == "canary") if run else (None, False)
    run_command, given = canary_commands(state, deps.config) if canary else (target.command, target.validate_command)
    stdin, described = None, ""
    resolved: dict[str, Any] = {}
    env = {**target.env, **(canary_env(state, deps.config) if canary else {})}  # the canary's model variable
    if given:  # the validator runs in the target env too: `python verify.py` means --python
        command, resolved = in_target_env(deps.host, given, target)
        described = f"`{' '.join(command)}`"  # whole: people read it shortened (agent/record/people.py), not cut
        output = locate(deps.host, run_command or target.command, target.workdir,
                        output=None if canary else target.output)[0]
    else:
        model = None if canary else job_model_folder(target, deps.host)  # the canary's is in its command or env
        own = builtin_check(deps.host, target.python, run_command or target.command, target.workdir,
                            output=None if canary else target.output, model_dir=model.path if model else None,
                            env=env, server_command=target.server_command)
        if isinstance(own, str):
            # ``own`` is a sentence of its own (maybe several clauses): it follows, never sits inside this one
            detail = f"the run exited 0 and no --validate command was given, so nothing verified its output: {own}"
            deps.record("validate", "validate", {"summary": detail, "verified": False})
            return {"outcome": "unverified", "outcome_detail": detail}
        command, stdin, described, output = own.argv, own.stdin, own.describe(), own.output
    older = stale_output(deps.host, output, run.get("run_dir") if run else None)
    if older:  # a run that exits 0 without writing leaves the last run's file (the canary's, say): not this one's
        result, report = CommandResult(1, "", older, 0.0), ValidationReport(verified=False, problems=[older])
    else:
        # a validator that is not found logs the PATH it ran with, as a run does (tools/env_scripts.py)
        line = f"{shlex.join(command)}\n{env_scripts.NOT_FOUND_TAIL}"
        result = deps.host.run(line, timeout=VALIDATE_TIMEOUT, cwd=target.workdir, env=env, stdin=stdin)
        report = parse_report(result.stdout)
        missing = env_scripts.not_found(result.stderr.splitlines())
        if missing and result.exit_code == env_scripts.NOT_FOUND_EXIT:
            fault = not_found_fault(missing, "canary" if canary else "validate", deps.trace.redactor.text(
                result.stderr[-4000:]), partial(where_looked, deps.host, target))
            deps.record("fault", "validate", {"stage": fault.stage, "summary": fault.summary,
                                              "evidence": [missing.line]})
            return {"validation": report, **record_fault(state, fault, launch=launch)}
    verified = result.exit_code == 0 and report.get("verified", True) is True
    if canary and not verified:
        stop_beside(deps.host, run)  # the target started beside the canary runs code about to change
    evidence = evidence_lines(report, result.stdout, result.stderr) or [f"the validator exited {result.exit_code}"]
    said = failing_lines(report, result.stdout, result.stderr) or evidence  # its verdict, not its warnings
    summary = ((f"verified by {described}: {report['sequences']} sequences, per-layer max abs error "
                f"{report.get('max_abs_error_per_layer', {})}" if "sequences" in report
                else f"verified by {described} (exit 0)") if verified
               else f"NOT verified by {described} (exit {result.exit_code}): {'; '.join(said[:3])}")
    summary += precision_said(report) if verified else ""
    deps.record("validate", "validate", {"summary": summary, "verified": verified, "report": report,
                                         "exit_code": result.exit_code, "builtin": not given,
                                         **resolved})
    if verified and canary:  # the cheap run is right: now the target model, once
        deps.record("canary_passed", "validate", {"launch": launch})
        return {"validation": report, "canary_done": True, "fault": None}
    if verified:
        return {"validation": report, "outcome": "verified", "outcome_detail": summary}
    if report.get("readable") is False or (result.exit_code == CANNOT_READ and not report):
        # the output could not be read at all: nothing says what is wrong with it, so nothing to repair from
        return {"validation": report, "outcome": "unverified", "outcome_detail": summary}
    facts = (OutputFacts.from_report(dict(report)) if not given
             else measured_facts(deps, run_command or target.command, output, env))
    red = deps.trace.redactor  # the validator's output is the job's data: redacted before it is kept
    said_out = "\n".join(f"({stream}) {line}" for stream, text in (("stderr", result.stderr), ("stdout", result.stdout))
                         for line in text.strip().splitlines()[-40:])
    fault = Fault("canary" if canary else "validate", "OutputMismatch", red.text("\n".join(said)), (),
                  caller_frames=tuple(last_caller_frames(state)), fingerprint="validate:" + evidence[0][:60],
                  log_excerpt=red.text(said_out), reach=reached_files(state, deps), output=facts)
    lacking = facts.missing_sequences if facts and not given else ()
    only_missing = bool(lacking) and all(any(p.startswith(f"row {r}: no ") for r in lacking)
                                         for p in report.get("problems") or [])
    if run and run.get("run_dir") and only_missing:  # what did the job say of the rows it did not write?
        fault = said_in_log(deps.host, deps.launcher.log_of(run), fault, lacking, red.text)
    deps.record("fault", "validate", {"stage": fault.stage, "summary": fault.summary, "evidence": evidence[:10],
                                      "facts": asdict(facts) if facts else None})
    suspect = model_patch_newest(list(state.get("patches") or []))
    update = record_fault(state, fault, launch=launch, repeated=suspect)
    update["wrong_output"] = None if canary else to_set_aside(output, facts, only_missing, own_check=not given)
    if suspect:  # the model's patch goes (revert); the fault it answered is the one to repair again
        update["fault"] = answered_fault(state)
    return {"validation": report, **update}


def precision_said(report: Any) -> str:
    """What medic's own check measured beyond the maxima: each layer's median per-token error, and the tokens
    over the tolerance that the job's own precision explains (a router near-tie under bf16)."""
    medians = report.get("median_error_per_layer") if isinstance(report, dict) else None
    if not isinstance(medians, dict):
        return ""
    excused = report.get("excused_tokens")
    said = ", median per-token error {" + ", ".join(f"'{k}': {float(v):.2g}" for k, v in medians.items()) + "}"
    if isinstance(excused, int) and excused:
        said += (f"; {excused} token(s) over the tolerance, each within what HF's own "
                 f"{report.get('job_dtype', 'lower-precision')} forward moves from fp32 there")
    return said


def measured_facts(deps: Deps, command: list[str], output: str | None, env: dict[str, str]) -> OutputFacts | None:
    """The user's validator said no in its own words: medic's own check of the same output says what is wrong
    with it as facts (which sequences are short, which layers' values are off), for the repairs to read. None
    when medic cannot find the output or the model, or its check could not read the output."""
    target = deps.config.target
    model = job_model_folder(target, deps.host) if (deps.config.target.command == command) else None
    own = builtin_check(deps.host, target.python, command, target.workdir, output=output,
                        model_dir=model.path if model else None, env=env)
    if isinstance(own, str):
        return None
    try:
        result = deps.host.run(own.argv, timeout=VALIDATE_TIMEOUT, cwd=target.workdir, env=env, stdin=own.stdin)
    except MedicError:
        return None
    report = parse_report(result.stdout)
    deps.record("check", "validate", {"check": own.describe(), "ok": result.exit_code == 0, "when": "validate",
                                      "detail": "; ".join(report.get("problems") or [])[:300]})
    return OutputFacts.from_report(dict(report))


def stale_output(host: Host, output: str | None, run_dir: str | None) -> str | None:
    """Why ``output`` cannot be this launch's, or None. Both times are the host's own (its clock may differ from
    medic's): the output's mtime against the run's pid file, written as the job started."""
    if not output or not run_dir:
        return None
    written, started = host.stat(output), host.stat(Run.in_dir(run_dir).pid)
    if written is None or started is None or written.mtime >= started.mtime:
        return None
    return (f"the job exited 0 but did not write its output: {output} is older than this launch "
            f"({started.mtime - written.mtime:.0f}s before it started)")


def reached_files(state: SessionState, deps: Deps) -> tuple[str, ...]:
    """The fixable files the driver reaches (the scan's list): where a repair of a wrong output looks."""
    try:
        return tuple(scan_files(deps.context(state), driver_path(seen_through(deps.config.target, state), deps.host)))
    except MedicError:
        return ()


def parse_report(stdout: str) -> ValidationReport:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                return {}
            return cast(ValidationReport, data) if isinstance(data, dict) else {}  # a validator's own JSON
    return {}


def last_caller_frames(state: SessionState) -> list[FrameRef]:
    """A wrong output has no traceback: the code on the last crash's path is where its cause likely is."""
    for fault in reversed(state.get("faults") or []):
        frames = fault.get("caller_frames") or []
        if frames:
            return [FrameRef(**f) for f in frames]
    return []


def config_for_shard(config: SessionConfig, shard: int) -> SessionConfig:
    target = config.target
    return config.model_copy(update={"target": target.model_copy(update={
        "command": with_shard(target.command, shard),
        "validate_command": with_shard(target.validate_command, shard) if target.validate_command else None,
        "output": target.output.replace(SHARD_PLACEHOLDER, str(shard)) if target.output else None,
        "env": {**target.env, "MEDIC_SHARD": str(shard),
                "MEDIC_SHARDS": str(total(config))},
    })})


def validate_shards(state: SessionState, deps: Deps) -> dict[str, Any]:
    record = state.get("run")
    if record is None or record["launcher"] == "detached":
        return validate_output(state, deps)
    count = total(deps.config)
    verified = list(state.get("verified_shards") or [])
    last: dict[str, Any] = {}
    for shard in record["shards"] or []:
        if shard in verified:
            continue
        # a shard run's own folder: its output must be newer than its start (validate.stale_output)
        folder = (record["shard_runs"][str(shard)] if record["launcher"] == "shard_runs"
                  else record.get("run_dir", ""))
        one_state: SessionState = {**state, "run": one_shard(record, folder)}
        last = validate_output(one_state, replace(deps, config=config_for_shard(deps.config, shard)))
        ok = last.get("outcome") == "verified"
        deps.record("shard", "validate", {"shard": shard, "verified": ok, "launch": record.get("n"),
                                          "of": count, "detail": str(last.get("outcome_detail") or "")[:300]})
        if not ok:  # a wrong output (a fault to repair), or one nothing could read
            return {**last, "verified_shards": sorted(verified)}
        verified.append(shard)
    if len(verified) < count:  # shards that finished in an earlier launch count too (a resumed launch skips its check)
        done: SessionState = {**state, "verified_shards": verified}
        verified += verify_finished(done, deps, finished_unverified(done))
    verified.sort()
    if len(verified) >= count:
        return {"validation": last.get("validation"), "verified_shards": verified, "outcome": "verified",
                "outcome_detail": f"all {count} shards verified; the last: {last.get('outcome_detail') or ''}"}
    return {"validation": last.get("validation"), "verified_shards": verified, "fault": None}  # the rest next


def one_shard(record: LaunchRecord, folder: str) -> DetachedLaunch:
    """One shard of a launch as validate_output reads a launch of one process: its run folder (whose output
    must be newer than its start) and the launch's number and kind."""
    fields = {k: v for k, v in record.items() if k in ("n", "kind", "run_id", "started", "ended", "exit_code")}
    return cast(DetachedLaunch, {**fields, "launcher": "detached", "run_dir": folder})


def finished_unverified(state: SessionState) -> list[int]:
    """Shards that ran to exit 0 in an earlier launch (one where another shard crashed) but were never validated."""
    verified = set(state.get("verified_shards") or [])
    done = {int(k) for launch in state.get("launches") or [] if launch["kind"] == "target"
            and launch["launcher"] != "detached" for k, s in (launch.get("shard_states") or {}).items()
            if s == "COMPLETED"}
    return sorted(done - verified)


def verify_finished(state: SessionState, deps: Deps, shards: list[int]) -> list[int]:
    """Before a relaunch: which of ``shards`` (finished, never validated) have a verified output, so they are not
    run again. One that is not verified just runs again: its fault, if any, shows there (nothing is recorded as one)."""
    ok: list[int] = []
    for shard in shards:
        quiet = replace(deps, config=config_for_shard(deps.config, shard))
        setattr(quiet, "record", lambda *args, **kwargs: None)  # noqa: B010  the verdict is the shard event below
        one_state: SessionState = {**state, "run": {"n": 0, "kind": "target", "launcher": "detached"}}
        verified = validate_output(one_state, quiet).get("outcome") == "verified"
        deps.record("shard", "launch", {"shard": shard, "verified": verified, "before_launch": True,
                                        "of": total(deps.config)})
        if verified:
            ok.append(shard)
    return ok


def before_relaunch(state: SessionState, deps: Deps, kind: str) -> tuple[SessionState, dict[str, Any]]:
    """Shards that finished while another crashed are checked before a target relaunch: a verified one is not run
    again. The state the launch plans from, and the update that records them."""
    if kind != "target" or total(deps.config) <= 1:
        return state, {}
    more = verify_finished(state, deps, finished_unverified(state))
    if not more:
        return state, {}
    verified = sorted({*(state.get("verified_shards") or []), *more})
    return {**state, "verified_shards": verified}, {"verified_shards": verified}


def nothing_left(deps: Deps, kind: str, shards: list[int]) -> None:
    if kind == "target" and total(deps.config) > 1 and not shards:
        raise RunError("every shard is verified already: nothing left to launch")
