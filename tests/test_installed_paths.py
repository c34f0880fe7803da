"""Installed code is recognised where a venv keeps it and where a Debian Python keeps it (dist-packages)."""

from agent.repair.types import RepairContext
from tools.host import LocalHost


def test_site_and_dist_packages_are_both_installed_code() -> None:
    ctx = RepairContext(host=LocalHost(), python="/usr/bin/python3", roots=(), library_packages=("vllm",),
                        fixable_packages=("speculators",), workdir="/job")
    assert ctx.library_package("/v/lib/python3.12/site-packages/vllm/config.py") == "vllm"
    assert ctx.library_package("/usr/lib/python3/dist-packages/vllm/config.py") == "vllm"
    assert ctx.is_fixable("/usr/lib/python3/dist-packages/speculators/x.py")
    assert ctx.library_package("/usr/lib/python3/dist-packages/speculators/x.py") is None  # fixable, not library
    assert ctx.library_package("/home/me/vllm/notes.py") is None and ctx.is_fixable("/job/extract.py")
