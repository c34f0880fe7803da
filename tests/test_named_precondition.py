"""A library refusal that names the step its own driver takes first: medic takes the same step, in our names.

The library here is vLLM 0.29's shape in small (a package on PYTHONPATH, read by the real probe): its engine
resolves the KV cache layout before it makes the cache config, and the config refuses to be read unresolved; the
fixable generator makes the config from the engine's parts, as speculators 0.3.0 does. The fault is the real
traceback of running the generator; the patched generator is run again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.faults import fault_from_log
from agent.repair.derived_precondition import named_precondition
from tests.fixtures_library import made_library
from tools.patches import apply_patch

LIBRARY = {
    "__init__.py": "",
    "config.py": '''
class CacheConfig:
    layout = None

    def resolved_layout(self):
        if self.layout is None:
            raise ValueError("KV cache layout has not been resolved yet; it is resolved once by the engine "
                             "core (resolve_cache_layout) unless explicitly set by the user.")
        return self.layout


class Config:
    def __init__(self):
        self.cache_config = CacheConfig()
''',
    "layouts.py": '''
class Layout:
    def __init__(self, name):
        self.name = name


def resolve_cache_layout(vllm_config, supported, specs=None):
    if vllm_config.cache_config.layout is None:
        vllm_config.cache_config.layout = supported[0][0] if specs is not None else "none"
    return Layout(vllm_config.cache_config.layout)
''',
    "executor.py": '''
class Executor:
    def __init__(self, vllm_config):
        self.layout = None

    def get_specs(self):
        return [{"layer.0": "full"}]

    def supported_layouts(self):
        return [["blocked", "flat"]]

    def set_layout(self, name):
        self.layout = name


class ProcExecutor(Executor):
    pass
''',
    "cache.py": '''
def cache_config_from_groups(vllm_config, groups, memory):
    return {"layout": vllm_config.cache_config.resolved_layout(), "groups": groups, "memory": memory}
''',
    "engine.py": '''
from stagelib.cache import cache_config_from_groups
from stagelib.layouts import resolve_cache_layout


class Engine:
    def __init__(self, vllm_config, executor_class):
        self.model_executor = executor_class(vllm_config)
        self.cache = self._initialize_caches(vllm_config)

    def _initialize_caches(self, vllm_config):
        specs = self.model_executor.get_specs()
        # the step this release added before the cache config is made
        layout = resolve_cache_layout(
            vllm_config,
            self.model_executor.supported_layouts(),
            [s for worker in specs for s in worker.values()],
        )
        self.model_executor.set_layout(layout.name)
        memory = 1 << 20
        return cache_config_from_groups(vllm_config, specs, memory)
''',
}
GENERATOR = '''
from stagelib.cache import cache_config_from_groups
from stagelib.config import Config
from stagelib.executor import ProcExecutor


class Generator:
    def __init__(self):
        self.vllm_config = Config()
        self.executor = ProcExecutor(vllm_config=self.vllm_config)
        specs = self.executor.get_specs()
        self.cache = cache_config_from_groups(
            vllm_config=self.vllm_config,
            groups=specs,
            memory=1024,
        )


if __name__ == "__main__":
    g = Generator()
    print("layout", g.cache["layout"], g.executor.layout)
'''


@pytest.fixture
def refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    made = made_library(tmp_path, monkeypatch, "stagelib", LIBRARY, GENERATOR)
    ctx, gen = made.ctx, made.fixable

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=60)

    return ctx, gen, run


def test_the_step_the_refusal_names_is_taken_the_way_the_library_takes_it(refused, tmp_path: Path) -> None:
    ctx, _, run = refused
    before = run()
    assert before.returncode != 0 and "has not been resolved yet" in before.stderr, before.stderr
    fault = fault_from_log(before.stderr.encode())
    [cand] = named_precondition(ctx, fault)
    assert cand.origin == "derived:named_precondition"
    diff = cand.patch.diff
    assert "+        from stagelib.layouts import resolve_cache_layout\n" in diff, diff
    assert ("+        layout = resolve_cache_layout(self.vllm_config, self.executor.supported_layouts(), "
            "[s for worker in self.executor.get_specs() for s in worker.values()])\n") in diff, diff
    assert "+        self.executor.set_layout(layout.name)\n" in diff, diff
    assert any("engine.py" in e and "resolve_cache_layout(" in e for e in cand.evidence), cand.evidence
    apply_patch(ctx.host, cand.patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    after = run()
    assert after.returncode == 0 and after.stdout.strip() == "layout blocked blocked", after.stderr


def test_nothing_when_the_step_reads_what_our_code_does_not_have(refused) -> None:
    """Our generator keeps no object with the methods the engine calls on its executor: no mapping, no patch."""
    ctx, gen, run = refused
    gen.write_text(GENERATOR.replace("self.executor = ProcExecutor(vllm_config=self.vllm_config)\n"
                                     "        specs = self.executor.get_specs()",
                                     "specs = [{'layer.0': 'full'}]"))
    fault = fault_from_log(run().stderr.encode())
    assert "has not been resolved yet" in fault.message
    assert named_precondition(ctx, fault) == []


def test_nothing_when_the_step_would_overwrite_a_name_of_ours(refused) -> None:
    ctx, gen, run = refused
    gen.write_text(GENERATOR.replace("specs = self.executor.get_specs()",
                                     "specs = self.executor.get_specs()\n        layout = 'mine'"))
    fault = fault_from_log(run().stderr.encode())
    assert named_precondition(ctx, fault) == []


def test_a_refusal_that_names_nothing_the_library_calls_gets_nothing(refused) -> None:
    ctx, _, run = refused
    config = Path(ctx.site_packages[0]).parent / "lib" / "site-packages" / "stagelib" / "config.py"
    config.write_text(LIBRARY["config.py"].replace("(resolve_cache_layout)", "(see the docs)"))
    fault = fault_from_log(run().stderr.encode())
    assert named_precondition(ctx, fault) == []
