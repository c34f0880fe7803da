"""The canary's command: the target's command with the model folder swapped for the canary's, as a path only.

Seen in the CPU dry run of the H200 kit (bench/gpu): `--canary-model model` with `--model model` in the command
turned `--model` into `--/…/canary/model` (a substring replace), and the canary died on its argument parser.
"""

from tools.canary import swap_model

CANARY = "/job/.medic/canary/model"


def test_relative_model_name_is_swapped_as_a_path_not_inside_option_names() -> None:
    command = ["python", "extract.py", "--model", "model", "--out", "hidden_states.pt"]
    assert swap_model(command, "model", CANARY) == ["python", "extract.py", "--model", CANARY, "--out",
                                                    "hidden_states.pt"]


def test_option_values_lists_and_paths_under_the_folder_are_swapped() -> None:
    command = ["run", "--model=model", "--dirs", "a,model", "model/tokenizer.json", "models", "my-model", "./x"]
    assert swap_model(command, "model/", CANARY) == ["run", f"--model={CANARY}", "--dirs", f"a,{CANARY}",
                                                     f"{CANARY}/tokenizer.json", "models", "my-model", "./x"]


def test_absolute_model_dir_still_swapped() -> None:
    command = ["/v/bin/python", "/w/extract.py", "--model", "/data/m1", "--out", "/data/m1-out.pt"]
    assert swap_model(command, "/data/m1", CANARY) == ["/v/bin/python", "/w/extract.py", "--model", CANARY,
                                                       "--out", "/data/m1-out.pt"]
