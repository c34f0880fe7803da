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
                  "tests.fixtures_server", "tests.fixtures_tmp", "tests.fixtures_replay", "tests.fixtures_registry"]

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


# The long tier (`make test-long`, marker ``long``): whole sessions on the real labs, and one oracle over a whole
# library, whose path a faster test of `make test` also walks; kept out of it so that `make test` stays within 20
# minutes on 2 cores. Each says which tests cover its path in `make test`; `pytest <nodeid>` runs any one.
LONG = {
    "tests/test_agent_lab.py::test_pristine_lab_to_verified_output_then_a_second_run_changes_nothing":
        "the no-scan cascade (one launch a fault): bench/cascade.py's medic-no-scan row; with the scan, test_as_typed",
    "tests/test_server_job.py::test_a_client_side_fix_reruns_only_the_client_and_a_server_traceback_explains_a_client":
        "a client-side fix on the live server: test_server_job_small's fake server, test_hs_validation's real one",
    "tests/test_shard_runs.py::test_a_two_shard_lab_extraction_is_repaired_once_and_every_shard_verified":
        "shard runs: the fake-target tests of test_shard_runs and test_slurm_session",
    "tests/test_main_guard.py::test_a_session_under_spawn_guards_the_driver_and_reaches_verified_output":
        "the guard itself: test_main_guard's relaunch on the lab",
    "tests/test_package_faults.py::test_the_fault_is_the_environments_and_its_remedy_is_the_declared_range":
        "the env-package remedy: test_package_faults' blame test on the lab",
    "tests/test_package_faults.py::test_medics_own_patches_are_not_blamed_nor_reverted": "the same session",
    "tests/test_package_faults.py::test_after_the_host_step_the_session_goes_on_past_the_import": "the same session",
    "tests/test_env_remedies.py::test_an_unattended_session_on_vllm_0_18_1_reaches_verified_output":
        "the host step: test_first_contact_input's stop and test_env_remedies' scan of the same lab",
    "tests/test_one_path.py::test_approve_mode_with_the_scan_on_waits_for_a_person_before_every_patch":
        "approve mode: test_approve, test_answers and test_readme_commands' approve-mode session",
    "tests/test_panel_terminal.py::test_the_panel_in_a_terminal_and_the_same_session_through_a_pipe":
        "the panel: test_panel_state and test_people_text; the lab session with the scan: test_as_typed",
    "tests/test_wrapped_job.py::test_a_server_job_wrapped_in_a_script_verifies_with_no_validate_and_two_server_loads":
        "reading through a wrapper and running it activated: test_wrapper; the server session: test_hs_validation",
    "tests/test_slurm_session.py::test_a_lab_session_under_slurm_repairs_the_run_fault_and_resubmits":
        "sessions under the real Slurm: test_slurm_session's fake-target ones; the lab session: test_as_typed",
    "tests/test_slurm_session.py::test_a_node_failure_is_resubmitted_without_a_patch":
        "a job the scheduler ended, resubmitted with no patch: test_slurm_session's preemption; NODE_FAIL's reading: "
        "test_slurm_outcomes",
    **{f"tests/test_reliability_kill.py::test_sigkill_then_resume_finishes_with_each_side_effect_once[{point}]":
       "a kill between a node's writes and its checkpoint, at every node: test_reliability_checkpoint; at random "
       "moments: test_killed_again_and_again_at_random_moments; the watch's and launch's points stay here"
       for point in ("diagnose", "candidate", "applied", "verify", "validate", "report")},
    "tests/test_reliability_ssh.py::test_link_down_while_a_watch_poll_is_in_flight":
        "a link that drops while watch polls: test_link_down_mid_run_then_back (its outage spans the watch's polls)",
    "tests/test_one_path.py::test_a_policy_deny_binds_the_scans_findings_too":
        "a policy's deny: test_approve's policy tests; the scan's findings through the approve node: "
        "test_readme_commands' approve-mode session",
    "tests/test_signature_corpus.py::":
        "an oracle over every call of the lab's library: the signature rules' tests, test_scan, test_wrapped_keyword",
}


# The modules (or SHARED groups) that take minutes, longest first: two workers end together when the long units
# start first and the short ones fill in after (the order of the rest, and inside each unit, is kept).
HEAVY = ("test_hs_validation", "slurm", "test_reliability_kill", "test_readme_commands", "test_server_job",
         "test_llm_real", "test_lab", "test_as_typed", "test_moe_output_check", "test_reliability_checkpoint")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.nodeid.startswith(long) for long in LONG):
            item.add_marker(pytest.mark.long)

    def weight(item: pytest.Item) -> int:
        module = Path(item.nodeid.split("::", 1)[0]).stem
        unit = GROUP_OF.get(module, module)
        return HEAVY.index(unit) if unit in HEAVY else len(HEAVY)
    items.sort(key=weight)


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
