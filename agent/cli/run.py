"""`medic run`, `medic resume`, `medic revert`, `medic sessions`: sessions from the command line."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from agent.cli.live import drive, tell
from agent.cli.stop import left_line
from agent.config import Budgets, SessionConfig, Target
from agent.job import local_path
from agent.outcomes import OUTCOMES, exit_code
from agent.session_files import load_config, read_failure, require_new, save_config, session_dir
from lab.build import DEFAULT_ROOT, RUN_ENV, LabPaths
from tools.console import make_console
from tools.errors import UsageError
from tools.server_input import check_commands

console = make_console(stderr=True)
NOTIFY_HELP = ("a shell command run when the session waits for a person, ends or is stopped, with MEDIC_SESSION, "
               "MEDIC_EVENT, MEDIC_OUTCOME, MEDIC_EXIT_CODE and MEDIC_SUMMARY in its environment")


def lab_target(root: Path = DEFAULT_ROOT, size: str = "tiny") -> Target:
    """The embedded lab as a target. With the large model, the tiny one is its canary."""
    from lab.server_lab import recorded_flavour, server_lab_target

    if recorded_flavour(root) == "server":
        return server_lab_target(root)
    paths = LabPaths(root)
    if not paths.python.exists():
        raise UsageError(f"no lab at {root}: run `medic lab build` (or pass --python/--workdir/-- COMMAND)")
    if not paths.model(size).exists():
        raise UsageError(f"the lab has no {size} model: run `medic lab build --size {size}`")
    # the canary of a bigger model is derived from its config.json by preflight (tools/canary.py)
    return Target(python=str(paths.python), workdir=str(paths.work), command=paths.command(size),
                  env=dict(RUN_ENV), validate_command=paths.validate_command(size),
                  model_dir=str(paths.model(size)) if size != "tiny" else None)


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env takes KEY=VALUE, not {pair!r}")
        env[key] = value
    return env


def one_line(err: ValidationError) -> UsageError:
    """pydantic's report as one line: which field, and what is wrong with it."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "config"
    return UsageError(f"{where}: {first['msg'].removeprefix('Value error, ')}")


def run(
    command: Annotated[list[str] | None, typer.Argument(help="the job, after --; default: the embedded lab")] = None,
    session: Annotated[str | None, typer.Option(help="session id (default: a timestamp)")] = None,
    host: Annotated[str, typer.Option(help="'local', an ssh config alias or user@host")] = "local",
    python: Annotated[str | None, typer.Option(help="the target env's python")] = None,
    workdir: Annotated[str | None, typer.Option(help="the job's folder on the host")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE for the job (repeatable)")] = None,
    validate: Annotated[str | None, typer.Option(help="command whose exit 0 means the output is verified")] = None,
    canary_model: Annotated[str | None, typer.Option(help="the model folder named in COMMAND: medic runs a tiny "
                                                     "model of its architecture first")] = None,
    max_launches: Annotated[int, typer.Option(help="launches of the target model")] = 12,
    max_wall: Annotated[float, typer.Option(help="seconds for the whole session")] = 4 * 3600.0,
    mode: Annotated[str, typer.Option(help="unattended | approve")] = "unattended",
    traces: Annotated[str, typer.Option(help="folder for the session trace")] = "traces",
    trust_new_host: Annotated[bool, typer.Option(help="accept and record an unknown host key")] = False,
    postmortem: Annotated[bool, typer.Option(help="print the postmortem at the end")] = False,
    lab: Annotated[Path, typer.Option(help="the embedded lab to run when no target is given")] = DEFAULT_ROOT,
    llm_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint for repairs no playbook "
                                                     "or derived repair finds (key: $OPENAI_API_KEY)")] = None,
    llm_model: Annotated[str | None, typer.Option(help="model name at that endpoint")] = None,
    lab_size: Annotated[str, typer.Option(help="lab model: tiny, or large (then tiny is the canary)")] = "tiny",
    canary: Annotated[bool, typer.Option(help="run the canary before the target model")] = True,
    overlap: Annotated[bool, typer.Option(help="start the target model's launch while the canary runs (a CPU "
                                          "job whose canary writes apart); kept only if nothing changed")] = True,
    scan: Annotated[bool, typer.Option(help="static drift scan before the first launch")] = True,
    confirm_launch: Annotated[bool, typer.Option(help="approve mode: also wait for a person before each relaunch")
                              ] = False,
    policy: Annotated[Path | None, typer.Option(help="rules that auto-approve or deny patches (YAML/TOML)")] = None,
    output: Annotated[str | None, typer.Option(help="the file the job writes, for medic's own check when no "
                                               "--validate is given (default: found in COMMAND)")] = None,
    patch_root: Annotated[list[str] | None, typer.Option("--patch-root", help="a folder medic may patch beyond "
                                                         "the env's own site-packages and --workdir (repeatable)")
                          ] = None,
    scheduler: Annotated[str, typer.Option(help="detached (a process on the host) or slurm (sbatch there)")
                         ] = "detached",
    partition: Annotated[str | None, typer.Option(help="Slurm partition for the job")] = None,
    sbatch_arg: Annotated[list[str] | None, typer.Option("--sbatch-arg", help="passed to sbatch as given, e.g. "
                                                         "--sbatch-arg=--time=2:00:00 (repeatable)")] = None,
    shards: Annotated[int, typer.Option(help="N shards: N detached runs on the host (a Slurm job array with "
                                        "--scheduler slurm); {shard} in the command (and --validate, --output) "
                                        "and $MEDIC_SHARD are the shard's index")] = 1,
    lead_shard: Annotated[bool, typer.Option(help="until one shard is verified, run only one")] = True,
    server: Annotated[str | None, typer.Option(help="a server to start first (its '{port}' is filled in); "
                                               "COMMAND is then its client, run once /health answers")] = None,
    port: Annotated[int | None, typer.Option(help="the server's port (default: a free one on 127.0.0.1)")] = None,
    keep_server: Annotated[bool, typer.Option(help="leave the last server running when the session ends "
                                              "(`medic stop SESSION` ends it)")] = False,
    notify: Annotated[str | None, typer.Option(help=NOTIFY_HELP)] = None,
    device: Annotated[str | None, typer.Option(help="the job's device, cuda or cpu (default: what the target "
                                               "env's torch sees); the scan predicts that device's startup checks")
                      ] = None,
) -> None:
    """Run the job until its output is VERIFIED, repairing drift on the way. Exit 0 only when verified."""
    from agent.session import connect_checked, run_session  # the session graph: a second of imports
    if mode not in ("unattended", "approve"):
        raise UsageError(f"--mode is unattended or approve, not {mode!r}")
    try:  # the config's own validation speaks pydantic: make it one line
        if command or python or workdir:
            if not (command and python and workdir):
                raise UsageError("a target of your own needs --python, --workdir and -- COMMAND together")
            # on this machine a relative path means one from here; a remote host needs absolute ones
            target = Target(host=host, python=local_path(python, host), workdir=local_path(workdir, host),
                            command=command, env=parse_env(env or []),
                            validate_command=shlex.split(validate) if validate else None,
                            trust_new_host=trust_new_host, model_dir=canary_model,  # as COMMAND names it
                            extra_patch_roots=[local_path(p, host) for p in patch_root or []],
                            # a relative output is where the job writes it: in its workdir
                            output=os.path.join(local_path(workdir, host), output) if output else None,
                            device=device)  # type: ignore[arg-type]  # pydantic checks it
        else:
            lab_ = lab_target(lab, lab_size)
            target = Target.model_validate({**lab_.model_dump(), "env": {**lab_.env, **parse_env(env or [])},
                                            "device": device,
                                            "extra_patch_roots": [local_path(p, "local") for p in patch_root or []]})
        if server or port or keep_server:
            if server is None and target.server_command is None:
                raise UsageError("--port and --keep-server go with --server")
            target = target.model_copy(update={k: v for k, v in {
                "server_command": shlex.split(server) if server else None, "server_port": port,
                "keep_server": keep_server or None}.items() if v is not None})
            Target.model_validate(target.model_dump())  # a bad --port fails here, in one line
        if target.server_command:  # what medic can prove wrong in the two commands costs no load (exit 2)
            pinned = check_commands(target.server_command, target.command, target.server_port)
            target = target.model_copy(update={"server_port": pinned})
        config = SessionConfig(
            session_id=session or time.strftime("s%Y%m%d-%H%M%S"), target=target, mode=mode,  # type: ignore[arg-type]
            budgets=Budgets(max_launches=max_launches, max_wall=max_wall), canary=canary, scan=scan,
            overlap=overlap,
            traces_dir=os.path.abspath(traces),  # watch, status and resume find it from any folder
            confirm_launch=confirm_launch, notify=notify,
            llm={k: v for k, v in {"base_url": llm_base_url, "model": llm_model}.items() if v} if (
                llm_base_url or llm_model) else None)
    except ValidationError as err:
        raise one_line(err) from None
    if policy is not None:
        from agent.policy import load_policy

        load_policy(policy)  # a bad file fails here, in one line, not inside the graph
        config = config.model_copy(update={"policy_file": str(policy.resolve())})
    config = with_scheduler(config, scheduler, partition, sbatch_arg or [], shards, lead_shard)
    require_new(config)
    connected = connect_checked(config)  # bad input (no such python, workdir or host) fails before anything is saved
    if config.slurm is not None and not connected.run("command -v sbatch", timeout=30).ok:
        connected.close()
        raise UsageError(f"--scheduler slurm: no sbatch on {connected.name}'s PATH")
    save_config(config)
    console.print(f"session [bold]{config.session_id}[/] — trace {Path(traces) / (config.session_id + '.jsonl')}")
    finish(config, drive(config, lambda view: run_session(config, host=connected, view=view)), postmortem)


def resume(session: str, postmortem: bool = False,
           notify: Annotated[str | None, typer.Option(help=NOTIFY_HELP)] = None) -> None:
    """Continue a session from its checkpoint (after medic died, or after an approval)."""
    from agent.session import pending_interrupt, run_session  # the session graph: a second of imports
    config = load_config(session)
    if notify is not None:  # from now on this command is told, by every later resume and approve too
        config = config.model_copy(update={"notify": notify or None})
        save_config(config)
    waiting = pending_interrupt(session)
    answer = None
    if waiting and waiting.get("kind") == "host_change":  # the person says the host step is done: go on
        steps = "; ".join(waiting.get("host_steps") or [])
        answer = {"action": "approve", "by": "person (medic resume)", "reason": f"host changed: {steps}"}
    finish(config, drive(config, lambda view: run_session(config, resume=answer, view=view)), postmortem)


def finish(config: SessionConfig, outcome: str, postmortem: bool) -> None:
    from agent.session import pending_interrupt  # the session graph: a second of imports
    report = session_dir(config.session_id) / "report.md"
    trace = Path(config.traces_dir) / f"{config.session_id}.jsonl"
    if outcome == "waiting":
        console.print(f"waiting for a person: `medic approve {config.session_id}`")
    elif outcome == "host_change":
        steps = " && ".join((pending_interrupt(config.session_id) or {}).get("host_steps") or [])
        console.print(f"the host needs a change medic does not make unattended: run `{steps}` on "
                      f"{config.target.host}, then `medic resume {config.session_id}`", markup=False)
    elif outcome == "internal_error":  # one line: what failed and where; the traceback is in the trace
        said = (read_failure(config.session_id) or {}).get("detail") or OUTCOMES[outcome].meaning
        console.print(f"medic: {said} — trace {Path(config.traces_dir) / (config.session_id + '.jsonl')}; "
                      f"`medic resume {config.session_id}` tries that step again", markup=False, soft_wrap=True)
    elif outcome == "stopped":
        console.print(f"medic stopped: `medic resume {config.session_id}` goes on (a job it launched keeps running)")
    elif report.exists():
        console.print(f"report: {report}")
    cut_short = outcome in ("stopped", "internal_error")  # medic ended before the session's end stopped its runs
    if config.target.server_command and (cut_short or config.target.keep_server):
        left = left_line(trace, config.session_id, config.target.host, last_only=not cut_short)
        if left:  # a loaded server holds the host's memory: say it is there and how to end it
            console.print(left, markup=False, soft_wrap=True)
    if postmortem:
        from agent.readers.postmortem import print_postmortem

        print_postmortem(Path(config.traces_dir) / f"{config.session_id}.jsonl")
    tell(config, outcome)
    raise typer.Exit(exit_code(outcome))


def revert(session: str) -> None:
    """Undo every patch of a session, newest first, byte-for-byte (refused for a file changed since)."""
    from agent.readers.watch import note_reverted
    from agent.session import connect_host
    from agent.session_files import session_lock
    from tools.reverts import RevertResult, revert_all

    config = load_config(session)
    gone: list[str] = []
    with session_lock(session):
        host = connect_host(config)

        def said(done: RevertResult) -> None:
            gone.append(done.patch_id)
            console.print(f"reverted {done.patch_id}: {', '.join(done.files)}")

        count = revert_all(host, config.ledger_dir, said)
        note_reverted(session, gone)  # `medic status` says the patches are gone, not only how the session ended
    console.print(f"{count} patch(es) of session {session} reverted")


def with_scheduler(config: SessionConfig, scheduler: str, partition: str | None, sbatch_args: list[str],
                   shards: int, lead_shard: bool) -> SessionConfig:
    """The --scheduler options, checked together: Slurm's only mean something with --scheduler slurm; --shards
    is a job array there, else N detached runs on the host."""
    from agent.scheduler import ShardSettings, SlurmSettings

    if scheduler not in ("detached", "slurm"):
        raise UsageError(f"--scheduler is detached or slurm, not {scheduler!r}")
    if shards < 1:
        raise UsageError(f"--shards is a count of shards (1 or more), not {shards}")
    if scheduler == "detached":
        if partition or sbatch_args:
            raise UsageError("--partition and --sbatch-arg need --scheduler slurm")
        if shards == 1:
            return config
        if config.target.server_command:
            raise UsageError("--shards does not go with --server (one server, one client)")
        return config.model_copy(update={"shards": ShardSettings(shards=shards, lead_shard=lead_shard)})
    slurm = SlurmSettings(partition=partition, sbatch_args=sbatch_args, shards=shards, lead_shard=lead_shard)
    return config.model_copy(update={"slurm": slurm})
