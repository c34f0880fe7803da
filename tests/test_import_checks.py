"""The during-load import checks of one launch run side by side in one process (agent/checks.py run_leading):
each module imported afresh there is proven; the first that is not goes to its own check, as before. Real
processes of this machine's Python, a real package on disk."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.checks import run_leading
from agent.repair.types import Check, RepairContext
from tools.host import LocalHost


def package(root: Path) -> dict[str, str]:
    """pkg.a imports pkg.b, which takes a name of pkg.a: pkg.a imports; pkg.b imported first does not (a cycle)."""
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "a.py").write_text("A = 1\nfrom pkg.b import B\n")
    (root / "pkg" / "b.py").write_text("from pkg.a import A\nB = 2\n")
    (root / "pkg" / "c.py").write_text("C = 3\n")
    return {"PYTHONPATH": str(root)}


def test_modules_proven_together_each_imported_afresh(tmp_path: Path) -> None:
    env = package(tmp_path)
    ctx = RepairContext(host=LocalHost(), python=sys.executable, roots=(), medic_dir=str(tmp_path / ".medic"))
    checks = [Check("import", "pkg.c"), Check("import", "pkg.a"), Check("import", "pkg.b"), Check("import", "json")]
    assert run_leading(ctx, checks, env) == [(True, "pkg.c imports in the target env"),
                                             (True, "pkg.a imports in the target env")]
    # pkg.b, loaded already by pkg.a's import, is imported afresh: its cycle shows, and its own check says so
    (failed,) = run_leading(ctx, checks[2:], env)
    assert failed[0] is False and "circular import" in failed[1]
    assert run_leading(ctx, checks[3:], env) == [(True, "json imports in the target env")]
