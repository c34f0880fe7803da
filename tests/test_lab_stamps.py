"""A stamped lab step is done only while what it made is there: a stamp whose products were removed under it (two
builds on one folder, a person cleaning up) is redone, with every step after it when the step is one the venv
depends on — not trusted until a later step fails on a missing file."""

from __future__ import annotations

from pathlib import Path

from lab.lab_files import write_atomic
from lab.paths import LabPaths
from lab.stamped import StampedBuilder, Step


class FileSteps(StampedBuilder):
    """Three steps that each write one file the next one reads, as the lab's wheels, venv and driver steps do."""

    def __init__(self, root: Path) -> None:
        self.paths = LabPaths(root)
        self.ran: list[str] = []

    def _write(self, step: str, writes: str, reads: str | None) -> None:
        self.ran.append(step)
        text = (self.paths.root / reads).read_text() if reads else "pins\n"  # a missing input fails, as pip would
        write_atomic(self.paths.root / writes, text)

    def steps(self, sizes: tuple[str, ...] = ("tiny",)) -> list[Step]:
        root = self.paths.root
        return [
            Step("wheels", "the constraints file", "1", lambda: self._write("wheels", "constraints.txt", None),
                 makes=(root / "constraints.txt",)),
            Step("venv", "reads the constraints", "1", lambda: self._write("venv", "venv.txt", "constraints.txt"),
                 makes=(root / "venv.txt",)),
            Step("driver", "reads the venv", "1", lambda: self._write("driver", "driver.txt", "venv.txt"),
                 makes=(root / "driver.txt",)),
        ]


def test_a_step_whose_product_is_gone_is_redone_with_what_depends_on_it(tmp_path: Path) -> None:
    builder = FileSteps(tmp_path / "lab")
    assert builder.build() == [] and builder.ran == ["wheels", "venv", "driver"]
    assert builder.ready()

    builder.ran.clear()
    assert builder.build() == ["wheels", "venv", "driver"] and builder.ran == []  # all there: all reused

    (tmp_path / "lab" / "constraints.txt").unlink()  # the file the race removed; its stamp stayed
    assert not builder.ready()
    assert builder.build() == []  # wheels redone, and the venv (and all after it) with it
    assert builder.ran == ["wheels", "venv", "driver"]
    assert builder.ready()


def test_a_late_step_whose_product_is_gone_is_redone_alone(tmp_path: Path) -> None:
    builder = FileSteps(tmp_path / "lab")
    builder.build()
    builder.ran.clear()
    (tmp_path / "lab" / "driver.txt").unlink()
    assert builder.build() == ["wheels", "venv"]
    assert builder.ran == ["driver"] and (tmp_path / "lab" / "driver.txt").read_text() == "pins\n"


def test_every_lab_step_that_later_steps_read_from_names_its_products(tmp_path: Path) -> None:
    """The lab builders' own steps: those whose files a later step opens say so (without it the race's missing
    server-constraints.txt was a failed install until the lab was removed by hand)."""
    from lab.build import LabBuilder
    from lab.paths import Variant
    from lab.server_pair_lab import server_lab_builder
    from lab.server_pairs import ServerPair

    pair_root = tmp_path / "pair"
    pair_steps = {s.name: s for s in server_lab_builder(LabPaths(pair_root), pair=ServerPair("0.7.0", "0.31.0"))
                  .steps(("tiny",))}
    assert pair_root / "server-constraints.txt" in pair_steps["wheels"].makes
    assert LabPaths(pair_root).python in pair_steps["venv"].makes
    assert pair_steps["dataset"].makes and pair_steps["driver"].makes and pair_steps["model-tiny"].makes

    variant_root = tmp_path / "variant"
    variant_steps = {s.name: s for s in LabBuilder(LabPaths(variant_root), variant=Variant("0.17.0"))
                     .steps(("tiny",))}
    assert variant_root / "vllm-requirements.txt" in variant_steps["wheels"].makes
    assert LabPaths(variant_root).driver in variant_steps["driver"].makes
