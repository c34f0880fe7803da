"""medic's own check of a hidden-state server job (speculators ≥ 0.5's client against a vLLM server), found from
the two commands: the client (tools/hs_layouts.py knows each release's) names the output folder and the dataset,
the server's ``--speculative_config`` the layer ids, either one the model folder. The check itself is
tools/hs_output_check.py, run by the target python with its text on stdin, like tools/output_check.py.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import asdict
from importlib import resources

from tools import hs_layouts
from tools.check_command import BuiltinCheck
from tools.errors import MedicError
from tools.host import Host, read_text
from tools.model_folder import MODEL_OPTION, on_host, option_values

SCRIPT = "hs_output_check.py"
SERVER_DTYPE_OPTION = "--dtype"  # vLLM's: auto (the model's own), bfloat16, float16, float32…


def named(command: Sequence[str], option: str | None) -> str | None:
    if option is None:
        return None
    values = option_values(command, re.compile(f"^{re.escape(option)}$"))
    return values[-1] if values else None  # argparse and typer keep the last


def launcher_ids(host: Host, server_command: Sequence[str], model_dir: str | None) -> list[int] | str:
    """The ids speculators' launch_vllm.py computes from its options and the model's layer count."""
    own = server_command[:server_command.index("--")] if "--" in server_command else list(server_command)
    at = own.index(hs_layouts.LAUNCHER_IDS_OPTION) + 1 if hs_layouts.LAUNCHER_IDS_OPTION in own else len(own)
    given = [int(w) for w in itertools.takewhile(str.isdigit, own[at:])]
    try:
        config = json.loads(read_text(host, f"{model_dir}/config.json"))
        n = int(config.get("text_config", config)["num_hidden_layers"])
    except (MedicError, OSError, ValueError, KeyError, TypeError) as exc:
        return (f"medic cannot tell the layer ids: {hs_layouts.LAUNCHER} counts them from the model's "
                f"num_hidden_layers, which it cannot read ({type(exc).__name__})")
    return hs_layouts.launcher_layer_ids(given, n, hs_layouts.LAUNCHER_NO_LAST not in own)


def layer_ids(host: Host, server_command: Sequence[str] | None, model_dir: str | None) -> list[int] | str:
    """The layer ids the server extracts, in its order, or why medic cannot tell (a sentence)."""
    option = hs_layouts.SPECULATIVE_OPTIONS[0]
    need = (f"medic cannot tell the layer ids (the server's {option} with method {hs_layouts.SERVER_METHOD} names "
            f"them as {'.'.join(hs_layouts.LAYER_IDS_PATH)})")
    if not server_command:
        return f"{need}: medic does not start the server (--server names it)"
    if any(w.rsplit("/", 1)[-1] == hs_layouts.LAUNCHER for w in server_command):
        return launcher_ids(host, server_command, model_dir)
    text = next((v for option in hs_layouts.SPECULATIVE_OPTIONS for v in option_values(
        server_command, re.compile(f"^{re.escape(option)}$"))), None)
    if text is None:
        return f"{need}: the server command has no {option}"
    try:
        value = json.loads(text)
        for key in hs_layouts.LAYER_IDS_PATH:
            value = value[key]
        return [int(x) for x in value]
    except (ValueError, KeyError, TypeError) as exc:
        return f"{need}: its value has none ({type(exc).__name__}: {str(exc)[:80]})"


def hs_builtin_check(host: Host, python: str, command: Sequence[str], workdir: str, *,
                     server_command: Sequence[str] | None = None, output: str | None = None,
                     model_dir: str | None = None) -> BuiltinCheck | str | None:
    """The check of a known client's output, why there is none, or None when ``command`` is no known client."""
    client = hs_layouts.client_of(list(command))
    if client is None:
        return None
    dataset = on_host(named(command, client.dataset_option) or client.dataset_default, workdir)
    folder = output or named(command, client.output_option) or client.output_default.format(dataset=dataset)
    folder = on_host(folder, workdir)
    if model_dir is None:
        candidates = [*option_values(command, MODEL_OPTION), *(a for a in server_command or () if
                                                                not a.startswith("-"))]
        model_dir = next((p for p in (on_host(a, workdir) for a in candidates)
                          if host.exists(f"{p.rstrip('/')}/config.json")), None)
    layers = layer_ids(host, server_command, model_dir)
    missing = [what for what, bad in (
        ("medic found no model folder with a config.json (named by the server's model, the client's --model or "
         "--canary-model DIR)", model_dir is None),
        (f"the dataset {dataset} (the client's {client.dataset_option}) is not there", not host.exists(dataset)),
        (layers if isinstance(layers, str) else "", isinstance(layers, str))) if bad]
    if missing:  # each a sentence of its own: joined, they still read as one
        return (f"medic cannot check the output of speculators {hs_layouts.releases_of(client)}'s client "
                f"`{shlex.join(command)[:200]}`: {'; '.join(missing)}. A --validate command would check it instead")
    assert model_dir is not None and not isinstance(layers, str)
    layouts = json.dumps([{**asdict(layout), "keys": list(layout.keys()), "describe": layout.describe()}
                          for layout in hs_layouts.LAYOUTS])
    argv = [python, "-", folder, "--model", model_dir, "--dataset", dataset, "--layers", ",".join(map(str, layers)),
            "--layouts", layouts, "--file-name", client.file_name, "--json"]
    for option, flag in ((client.max_samples_option, "--max-samples"), (client.world_size_option, "--world-size"),
                         (client.rank_option, "--rank")):
        value = named(command, option)
        if value is not None:
            argv += [flag, value]
    dtype = named(server_command or [], SERVER_DTYPE_OPTION)
    if dtype:  # the precision the server computes in: each token is judged against the reference's own there
        argv += ["--dtype", dtype]
    script = resources.files("tools").joinpath(SCRIPT).read_text(encoding="utf-8")
    return BuiltinCheck(argv, script, folder, model_dir)
