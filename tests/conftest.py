"""Shared fixtures. Each family lives in its own module; this file only gathers them, and says which tests may
run side by side (`make test` runs two pytest-xdist workers with ``--dist loadscope``)."""

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures_ssh", "tests.fixtures_lab", "tests.fixtures_fake", "tests.fixtures_slurm",
                  "tests.fixtures_server", "tests.fixtures_tmp", "tests.fixtures_replay"]

# every event a test's session writes must fit its payload (agent/payloads.py); the medic processes the tests
# start inherit it
os.environ["MEDIC_STRICT_EVENTS"] = "1"
# a test that names no $MEDIC_HOME of its own still never meets another worker's sessions, nor the user's
if "MEDIC_HOME" not in os.environ:
    os.environ["MEDIC_HOME"] = tempfile.mkdtemp(prefix="medic-test-home-")
    atexit.register(shutil.rmtree, os.environ["MEDIC_HOME"], True)

# the tests send Ctrl-C (SIGINT) to the medic they start: a suite started in the background (`make test &`,
# nohup) inherits SIGINT ignored, and an ignored signal stays ignored in every child; a handled one is reset
signal.signal(signal.SIGINT, signal.default_int_handler)

# Modules that share something only one test may use at a time run on one worker, in file order: the one Slurm
# cluster (its queue and node), and the host's libtcmalloc (CI removes it in test_first_contact_input; the
# 0.18.1 session of test_env_remedies needs it, and runs first). Every other module is a unit of its own, so its
# module-scoped session (one real story shared by its tests) runs once. (Not xdist_group marks: pytest 9 ignores
# the node ids xdist's loadgroup rewrites, so the grouping lives in the scheduler.)
SHARED = {
    "slurm": ("test_rank_logs", "test_slurm_jobs", "test_slurm_outcomes", "test_slurm_requeue", "test_slurm_session",
              "test_env_remedies", "test_first_contact_input"),
}
GROUP_OF = {module: group for group, modules in SHARED.items() for module in modules}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadscope`` (make test): a module per unit of work, the modules of SHARED together."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedResources(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return GROUP_OF.get(Path(module).stem, module)

    return SharedResources(config, log)
