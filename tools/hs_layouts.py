"""What speculators ≥ 0.5's offline client writes, per release, read from each release's own writer.

From 0.5.0 on, ``generate-offline-data`` asks a vLLM server (speculative method ``extract_hidden_states``) for each
dataset row and moves the file the server's connector wrote to ``<output>/hs_<row>.safetensors``. The client
names the folder and the rows; the connector the server runs names the tensors. medic's own check
(tools/hs_output_check.py, run in the target env) reads a folder with these records and nothing else: a file
that fits none of ``LAYOUTS`` is an output it cannot read, and the report says what it would need.

Sources: the client at each tag of github.com/vllm-project/speculators (0.5–0.7 have no CLI: the repository's
``scripts/data_generation_offline.py`` is the client) or the release's wheel on PyPI (0.8.0, 0.8.1, 0.9.0: the
tags are not in the repository snapshot read); the tensors from vLLM's ``ExampleHiddenStatesConnector`` and
hs-connectors' ``FP8HiddenStatesConnector``; the layer ids from speculators' ``scripts/launch_vllm.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Client:
    """One release's client: how a command names it, and the options that say what it writes where."""

    release: str
    source: str  # the file the rest was read from
    entry: tuple[str, ...]  # words of the command that name this client (a script's name, a CLI's subcommand)
    output_option: str = "--output"
    dataset_option: str = "--preprocessed-data"
    dataset_default: str = "./output"
    output_default: str = "{dataset}/hidden_states"  # when the output option is not given
    max_samples_option: str = "--max-samples"
    world_size_option: str | None = "--world-size"  # multi-node: each rank writes its contiguous chunk of rows
    rank_option: str | None = "--rank"
    file_name: str = "hs_{index}.safetensors"  # index = the dataset row


SCRIPT = ("data_generation_offline.py",)
CLI = ("generate-offline-data",)

CLIENTS: tuple[Client, ...] = (
    # v0.5.0 scripts/data_generation_offline.py: worker() moves the server's file to hs_{idx}.safetensors;
    # --output default args.preprocessed_data/"hidden_states"; --max-samples takes the first rows; no ranks.
    Client("0.5.0", "scripts/data_generation_offline.py @ v0.5.0", SCRIPT, world_size_option=None, rank_option=None),
    # v0.6.0 scripts/data_generation_offline.py + src/speculators/data_generation/offline.py: the same file
    # names; --world-size/--rank split min(max_samples, rows) into contiguous chunks (get_indices_to_process);
    # the client waits for the connector's ``.lock`` before it moves the file. v0.6.0.1 changed vllm_client.py only.
    Client("0.6.0", "scripts/data_generation_offline.py, src/speculators/data_generation/offline.py @ v0.6.0", SCRIPT),
    # v0.7.0: the same script; --validate-outputs now calls offline.check_hidden_states (token_ids == the row's
    # input_ids, hidden_states.shape[0] == tokens, no NaN). v0.7.0.1 changed vllm_client.py only.
    Client("0.7.0", "scripts/data_generation_offline.py, src/speculators/data_generation/offline.py @ v0.7.0", SCRIPT),
    # 0.8.0 wheel speculators/cli/generate_offline_data.py: the CLI `speculators generate-offline-data`, typer
    # options with the script's names and defaults (--preprocessed-data ./output, --output None); offline.py's
    # check_hidden_states counts NaN/inf per layer slot of hidden_states [tokens, layers, hidden].
    Client("0.8.0", "speculators-0.8.0 wheel: speculators/cli/generate_offline_data.py", CLI),
    # 0.8.1 wheel: cli/generate_offline_data.py and data_generation/offline.py identical to 0.8.0's.
    Client("0.8.1", "speculators-0.8.1 wheel: speculators/cli/generate_offline_data.py", CLI),
    # 0.9.0 wheel: the same writer; check_hidden_states asks for both keys; cached files that safe_open refuses
    # are written again (find_corrupt_hidden_state_indices); generate_hidden_states_async returns (handle, params).
    Client("0.9.0", "speculators-0.9.0 wheel: speculators/cli/generate_offline_data.py", CLI),
)


@dataclass(frozen=True)
class Layout:
    """The tensors of one record: ``states`` is ``[tokens, layer slots, hidden]`` in the order of the server's
    layer ids; ``scales`` (when the connector quantizes) multiplies it back, one factor per token."""

    name: str
    source: str
    releases: str
    tokens: str = "token_ids"
    states: str = "hidden_states"
    scales: str | None = None

    def keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.tokens, self.states, self.scales) if k)

    def describe(self) -> str:
        scaled = f", {self.scales} [tokens, 1, 1] (states x scales)" if self.scales else ""
        return (f"{self.name} (speculators {self.releases}): {self.tokens} [tokens], {self.states} "
                f"[tokens, layers, hidden]{scaled}")


LAYOUTS: tuple[Layout, ...] = (
    # hs-connectors 0.9.0 hs_connectors/fp8_hidden_states_connector.py (--hidden-states-backend fp8, pinned by
    # speculators 0.9.0): float8_e4m3fn states + fp32 hidden_states_scales; hs_connectors/fp8_utils.py dequantizes
    # as states.to(dtype) * scales. Listed first: its keys include the plain layout's.
    Layout("fp8", "hs-connectors-0.9.0 wheel: hs_connectors/fp8_hidden_states_connector.py, fp8_utils.py", "0.9",
           scales="hidden_states_scales"),
    # vLLM's ExampleHiddenStatesConnector, the file backend of every release (launch_vllm.py @ v0.5.0–v0.7.0,
    # hs_connectors/transfer.py FileBackend in 0.7–0.9); read back by speculators/train/data.py ("hidden_states":
    # [seq_len, num_layers, hidden_size], "token_ids": [seq_len]) and offline.check_hidden_states.
    Layout("file", "speculators train/data.py, data_generation/offline.py @ v0.5.0–0.9.0 (the connector's record)",
           "0.5–0.9"),
)

# The server's layer ids: launch_vllm.py (v0.5.0–v0.7.0) passes them to `vllm serve` as this path of the JSON
# --speculative_config (method extract_hidden_states); id L is the input of decoder layer L, HF's
# hidden_states[L], and id num_hidden_layers the last layer's output before the final norm.
SPECULATIVE_OPTIONS = ("--speculative_config", "--speculative-config")
# A server started through that script (`python scripts/launch_vllm.py MODEL [--target-layer-ids …] -- VLLM_ARGS`)
# has no JSON to read: its ids are the script's rule, [2, n // 2, n - 3, n] for n = num_hidden_layers, or the
# given ids with n appended unless --no-include-last-layer (launch_vllm.py @ v0.5.0–v0.7.0, unchanged there).
LAUNCHER = "launch_vllm.py"
LAUNCHER_IDS_OPTION = "--target-layer-ids"
LAUNCHER_NO_LAST = "--no-include-last-layer"
LAYER_IDS_PATH = ("draft_model_config", "hf_config", "eagle_aux_hidden_state_layer_ids")
SERVER_METHOD = "extract_hidden_states"


def launcher_layer_ids(given: list[int], num_hidden_layers: int, include_last: bool) -> list[int]:
    n = num_hidden_layers
    if not given:
        return [2, n // 2, n - 3, n]
    return [*given, n] if include_last and n not in given else list(given)


def client_of(command: list[str] | tuple[str, ...]) -> Client | None:
    """The newest known client whose entry the command names (releases sharing an entry write alike)."""
    words = {w.rsplit("/", 1)[-1] for w in command}
    found = [c for c in CLIENTS if words & set(c.entry)]
    return found[-1] if found else None


def releases_of(client: Client) -> str:
    """The releases whose client is named the same way, e.g. '0.8.0, 0.8.1, 0.9.0'."""
    return ", ".join(c.release for c in CLIENTS if c.entry == client.entry)
