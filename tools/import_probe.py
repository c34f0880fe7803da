"""Import a package's modules in a fresh process of the target python, with a scratch folder laid over its env.

The import alone does not prove a change to the env: a library may absorb the failure of its own compiled module
(vLLM warns and goes on without ``vllm._C``, built against one torch, when another is laid over it; the run dies
later on an op that is not there). So each compiled module at the top of the packages is loaded too, each in its
own process (a package may ship variants of one module, one per CPU, that must not be loaded side by side), and
one that loads in the env as it is must load with the folder laid over it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tools.host import Host

# the overlay first, then whatever PYTHONPATH the host gives the target python already
WITH_OVERLAY = 'PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}" exec "$2" -c "$3" "$4" "$5"'
# Import the modules in order (then, when named, one compiled module): what failed, and the compiled modules found
PROBE = r"""
import importlib, importlib.machinery, importlib.util, json, pathlib, sys
modules, extension, failed, found = json.loads(sys.argv[1]), sys.argv[2], {}, []
def last(err):
    return ((type(err).__name__ + ": " + str(err)).strip().splitlines() or [""])[-1][:300]
for name in [*modules, *([extension] if extension else [])]:
    try:
        importlib.import_module(name)
    except BaseException as err:
        failed[name] = last(err)
for top in dict.fromkeys(m.split(".")[0] for m in modules):
    spec = importlib.util.find_spec(top) if not extension else None
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(pathlib.Path(root).iterdir()):
            suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if path.name.endswith(s)), None)
            if suffix:
                found.append(top + "." + path.name[: -len(suffix)])
print(json.dumps({"failed": failed, "compiled": found}))
"""
TIMEOUT = 900.0


def import_with(host: Host, python: str, modules: tuple[str, ...], overlay: str,
                env: Mapping[str, str] | None = None) -> str:
    """Why ``modules`` do not import with ``overlay`` laid over the env, or lose a compiled module that loads in the
    env as it is; "" when they import and keep every one."""
    failed, compiled = run_probe(host, python, modules, overlay, "", env)
    if failed:
        return next(iter(failed.values()))
    lost = []
    for name in compiled:
        said = run_probe(host, python, modules, overlay, name, env)[0].get(name)
        if said is not None and name not in run_probe(host, python, modules, None, name, env)[0]:
            lost.append(f"{name} loads in the env but not with the plan laid over it: {said}")
    return "; ".join(lost)


def run_probe(host: Host, python: str, modules: tuple[str, ...], overlay: str | None, extension: str,
              env: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """(module -> why it did not import, the compiled modules of their packages) from one fresh process."""
    args = [PROBE, json.dumps(list(modules)), extension]
    argv = ["sh", "-c", WITH_OVERLAY, "overlay", overlay, python, *args] if overlay else [python, "-c", *args]
    result = host.run(argv, timeout=TIMEOUT, env=dict(env or {}))
    answer = result.last_json()
    if not isinstance(answer, dict):  # it died (a crash in a compiled module's load): the process's last words
        last = (result.stderr.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
        return {extension or modules[0]: last[:300]}, []
    return dict(answer.get("failed") or {}), [str(c) for c in answer.get("compiled") or ()]
