"""What a two-process job's commands must say before medic starts its server, checked on the commands alone.

Each refusal here is input medic can prove wrong before any load: a server whose port medic cannot know (it would
poll one port while the server listens on another, for the whole ready timeout), a client endpoint on a port the
server will not use, a JSON option value that does not parse (the server would refuse it after the load, and
medic reads the layer ids from it), a model folder that is not on the host (vLLM would take the path for a Hub
id and fail as a network error). One line each, raised as UsageError (exit 2), before anything is patched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from tools import hs_layouts
from tools.errors import UsageError
from tools.host import Host
from tools.model_folder import MODEL_OPTION, on_host, option_values
from tools.server_job import PORT_FIELD, names_port, with_port

PORT_OPTION = re.compile(r"^--port$")
# an http(s) URL in a word, its host and the port it names (none: the scheme's default)
URL = re.compile(r"https?://(\[[^\]]*\]|[^/\s:?#@]+)(?::(\d+|\{port\}))?")
LOOPBACK = ("127.0.0.1", "localhost", "0.0.0.0", "[::1]")  # where the server medic starts is reached
SERVE = "serve"  # `vllm serve MODEL`, `python -m vllm.entrypoints.cli.main serve MODEL`: the model comes next
FILLED = 1  # any number stands in for {port} where only the rest of a word matters


def server_port(server: Sequence[str], port: int | None) -> int | None:
    """The port medic must poll, pinned when the server's command names it, or None for a free one medic picks
    (the command then carries ``{port}``). Refuses a server whose port medic cannot know."""
    if names_port(server):
        return port
    named = option_values(server, PORT_OPTION)
    if named and named[-1].isdigit():
        own = int(named[-1])
        if port is not None and port != own:
            raise UsageError(f"--port {port}, but --server listens on --port {own}: give one port (write "
                             f"`--port {PORT_FIELD}` in --server and medic fills in --port's)")
        return own
    if port is not None:
        return port  # the server takes its port from elsewhere (a config file, a variable): the user says where
    raise UsageError(f"--server names no port, so medic cannot know where it listens: add `--port {PORT_FIELD}` "
                     f"to it (medic fills in a free port, or --port N)")


def check_client(client: Sequence[str], port: int | None) -> None:
    """Every URL the client names must reach the server's port: ``{port}``, or the pinned port as a number."""
    where = f"port {port}" if port is not None else f"a free port medic picks ({PORT_FIELD} in the client)"
    urls = [m for word in client for m in URL.finditer(word) if m.group(1) in LOOPBACK or m.group(2) == PORT_FIELD]
    for url in urls:
        named = url.group(2)
        if named == PORT_FIELD or (named is not None and port is not None and int(named) == port):
            continue
        said = f"port {named}" if named else "no port"
        raise UsageError(f"the client's endpoint {url.group(0)} names {said}, but the server listens on {where}: "
                         f"write {url.group(0).split('://')[0]}://{url.group(1)}:{PORT_FIELD} there")
    if not urls and not names_port(client) and hs_layouts.client_of(list(client)) is not None:
        # a known speculators client with no endpoint asks its own default, not the server medic starts
        raise UsageError(f"the client names no endpoint on the server's port: add "
                         f"`--endpoint http://127.0.0.1:{PORT_FIELD}/v1` to it")


def check_json_options(server: Sequence[str]) -> None:
    """A JSON option value (``--speculative_config {...}``) must parse: vLLM parses it only after medic
    has started it, and medic reads the layer ids from the speculative config before."""
    words = with_port(server, FILLED)
    for i, word in enumerate(words):
        option, eq, value = word.partition("=") if word.startswith("-") else ("", "", word)
        if not eq:
            option = words[i - 1] if i and words[i - 1].startswith("-") else "a word"
        if not value.lstrip().startswith("{"):
            continue
        try:
            json.loads(value)
        except ValueError as err:
            raise UsageError(f"--server: the value of {option} is not JSON ({err}): {value[:80]}") from None


def model_words(server: Sequence[str], client: Sequence[str]) -> list[str]:
    """The model paths the two commands name: the word after ``serve`` and the model options' values."""
    found = [server[server.index(SERVE) + 1]] if SERVE in server[:-1] else []
    found += option_values(server, MODEL_OPTION) + option_values(client, MODEL_OPTION)
    return list(dict.fromkeys(found))


def check_model_folders(host: Host, server: Sequence[str], client: Sequence[str], workdir: str) -> None:
    """A model named by a path (``/m``, ``./m``) must be a folder on the host: a Hub id (``org/name``) is left to
    the library, a missing path would read as a failed download after the server started."""
    for word in model_words(with_port(server, FILLED), with_port(client, FILLED)):
        if not word.startswith(("/", "./", "../")):
            continue
        path = on_host(word, workdir)
        if not host.exists(path):
            raise UsageError(f"the model folder {word} is not on {host.name} ({path}): the server would take it "
                             f"for a Hub id and fail as a download")


def check_commands(server: Sequence[str], client: Sequence[str], port: int | None) -> int | None:
    """All the checks that need no host; the port to poll (see server_port)."""
    check_json_options(server)
    pinned = server_port(server, port)
    check_client(client, pinned)
    return pinned
