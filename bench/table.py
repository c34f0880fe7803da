"""The benches' result tables: one header, a rule, one line per row; the last column is free text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

Column = tuple[str, str]  # (title, a format spec with its alignment and width: "<22", ">7.1f")


def table(columns: Sequence[Column], rows: Iterable[Sequence[object]], last: str) -> list[str]:
    """``rows`` give one value per column and then the free text titled ``last``."""
    widths = [re.sub(r"\.\d+[a-z%]?$|[a-z%]$", "", spec) for _, spec in columns]  # a title has no precision
    head = " ".join(f"{title:{width}}" for (title, _), width in zip(columns, widths, strict=True)) + f"  {last}"
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = " ".join(f"{value:{spec}}" for (_, spec), value in zip(columns, row, strict=False))
        lines.append(f"{cells}  {row[len(columns)]}")
    return lines
