"""Shared fixtures. Each family lives in its own module; this file only gathers them."""

pytest_plugins = ["tests.fixtures_ssh", "tests.fixtures_lab", "tests.fixtures_fake", "tests.fixtures_slurm"]
