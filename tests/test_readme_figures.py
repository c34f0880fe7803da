"""The README's summary of the space quotes the benches' own totals: every `key=value` it quotes from the space
bench's totals line, its forced column and the architectures column is that line's, so a bench rerun that moves
a figure fails here until the README says it (read from the committed results, no bench run)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAIR = re.compile(r"(\w+)=(\d+%?)")


def totals_line(results: Path, prefix: str) -> dict[str, str]:
    line = next(line for line in results.read_text().splitlines() if line.startswith(prefix))
    return dict(PAIR.findall(line))


def quoted(readme: str, opening: str) -> dict[str, str]:
    """The figures of the README's `…` span that opens with ``opening``."""
    span = re.search(rf"`({re.escape(opening)}[^`]*)`", readme, re.S)
    assert span, f"the README quotes no `{opening}…` figures"
    return dict(PAIR.findall(span.group(1)))


def test_the_readme_quotes_the_space_benches_own_totals() -> None:
    readme = (REPO / "README.md").read_text()
    space = REPO / "bench" / "RESULTS-space.md"
    for opening, prefix in (("pairs=", "pairs="), ("no_deps: pairs=", "no_deps: pairs=")):
        said, measured = quoted(readme, opening), totals_line(space, prefix)
        assert said and all(measured.get(k) == v for k, v in said.items()), (opening, said, measured)
    main = totals_line(space, "pairs=")
    assert f"({main['untried']} pairs not run yet" in readme or main["untried"] == "0"
    assert re.search(rf"of the {main['extractable']} pairs whose vLLM does not\s+refuse the job itself, "
                     rf"{main['verified']} verified \({main['verified_of_extractable'].rstrip('%')}\s?%", readme)
    arch = totals_line(REPO / "bench" / "RESULTS-space-arch.md", "runs=")
    assert re.search(rf"{arch['verified']} of {arch['eagle3_runs']}\s+EAGLE-3 runs verified", readme)
