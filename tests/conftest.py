"""Shared fixtures. Each family lives in its own module; this file only gathers them."""

import os

pytest_plugins = ["tests.fixtures_ssh", "tests.fixtures_lab", "tests.fixtures_fake", "tests.fixtures_slurm",
                  "tests.fixtures_server"]

# every event a test's session writes must fit its payload (agent/payloads.py); the medic processes the tests
# start inherit it
os.environ["MEDIC_STRICT_EVENTS"] = "1"
