"""Source tools against a small fake library, read by a real python that must never import it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools import source
from tools.errors import SourceError
from tools.host import LocalHost

PY = sys.executable

FAKE_LIB = {
    # Importing any of these packages would blow up: the probe must only read them.
    "__init__.py": "from .core import Engine\nraise RuntimeError('fakelib must never be imported')\n",
    "base.py": """
        class BaseRunner:
            def __init__(self, model: str, device: str = "cpu"):
                self.model = model

            def load(self):
                return None

            def execute_model(self, batch):
                return batch
        """,
    "core.py": """
        from dataclasses import KW_ONLY, dataclass, field

        import msgspec
        from pydantic import BaseModel

        from .base import BaseRunner
        from .config import config


        class Engine:
            def __init__(self, config, *, verbose: bool = False, **extra):
                self.config = config
                self.steps: int = 0

            def step(self, batch: list[int], /, scale: float = 1.0) -> list[int]:
                def helper():
                    return "nested, not ours"

                if not batch:
                    return []
                return [x * scale for x in batch]

            @property
            def ready(self) -> bool:
                return True

            @classmethod
            def build(cls, name: str) -> "Engine":
                return cls(name)

            @staticmethod
            def version() -> str:
                return "1"


        @dataclass
        class Request:
            request_id: str
            prompt: list[int] = field(default_factory=list)
            priority: int = 0
            cache: dict = field(init=False, default_factory=dict)
            _: KW_ONLY
            lora: str | None = None


        @dataclass
        class ChildRequest(Request):
            priority: int = 5
            extra: int = 1


        class Settings(BaseModel):
            name: str
            retries: int = 3
            _secret: int = 0


        class Msg(msgspec.Struct, kw_only=True):
            a: int
            b: str = "x"


        @config
        class ModelConfig:
            model: str = "m"
            max_len: int


        class Runner(BaseRunner):
            def run(self, n):
                out = Engine(n, verbose=True).step([n])
                return self.execute_model(batch=out)


        def make_engine(config, *, verbose=False, retries: int = 3, **kw) -> Engine:
            return Engine(config, verbose=verbose)
        """,
    "config.py": """
        from dataclasses import dataclass

        def config(cls=None, **kwargs):
            def decorator(c):
                return dataclass(c, **kwargs)
            return decorator if cls is None else decorator(cls)
        """,
    "api.py": "from .core import *\n",
    "sub/__init__.py": "raise RuntimeError('fakelib.sub must never be imported')\n",
    "sub/moved.py": "def relocated_helper(x):\n    return x\n",
}


def write_fake_lib(folder: Path) -> Path:
    for rel, text in FAKE_LIB.items():
        path = folder / "fakelib" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return folder / "fakelib"


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_lib(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def extra(lib: Path) -> list[str]:
    return [str(lib.parent)]


HOST = LocalHost()


def test_module_path_never_imports_parents(lib: Path, extra: list[str]) -> None:
    assert source.module_path(HOST, PY, "fakelib", path_extra=extra) == str(lib / "__init__.py")
    assert source.module_path(HOST, PY, "fakelib.sub.moved", path_extra=extra) == str(lib / "sub/moved.py")
    with pytest.raises(SourceError, match=r"no module 'fakelib\.nope'"):
        source.module_path(HOST, PY, "fakelib.nope", path_extra=extra)


def test_find_symbol_forms_reexports_and_inheritance(lib: Path, extra: list[str]) -> None:
    dotted = source.find_symbol(HOST, PY, "fakelib.core.Engine.step", path_extra=extra)
    colon = source.find_symbol(HOST, PY, "fakelib.core:Engine.step", path_extra=extra)
    assert dotted == colon
    assert (dotted.kind, dotted.name, dotted.module) == ("def", "Engine.step", "fakelib.core")
    assert dotted.source.lstrip().startswith("def step(") and dotted.end > dotted.start
    reexported = source.find_symbol(HOST, PY, "fakelib:Engine", path_extra=extra)
    assert (reexported.path, reexported.kind) == (str(lib / "core.py"), "class")
    inherited = source.find_symbol(HOST, PY, "fakelib.core:Runner.load", path_extra=extra)
    assert inherited.path == str(lib / "base.py") and inherited.name == "BaseRunner.load"
    starred = source.find_symbol(HOST, PY, "fakelib.api:make_engine", path_extra=extra)
    assert (starred.path, starred.module) == (str(lib / "core.py"), "fakelib.core")
    decorated = source.find_symbol(HOST, PY, "fakelib.core:Engine.ready", path_extra=extra)
    assert decorated.source.lstrip().startswith("@property")
    with pytest.raises(SourceError, match="no member nope"):
        source.find_symbol(HOST, PY, "fakelib.core:Engine.nope", path_extra=extra)


class CountingHost(LocalHost):
    def __init__(self) -> None:
        self.started = 0

    def run(self, command, **kwargs):  # type: ignore[no-untyped-def]
        self.started += 1
        return super().run(command, **kwargs)


def test_many_signatures_come_from_one_process_each_with_its_own_answer(extra: list[str]) -> None:
    host = CountingHost()
    targets = ["fakelib.core:Engine", "fakelib.core:Engine.nope", "fakelib.core.Engine.step"]
    answers = source.signatures(host, PY, targets, path_extra=extra)
    assert host.started == 1
    assert answers["fakelib.core:Engine"] == source.signature(HOST, PY, "fakelib.core:Engine", path_extra=extra)
    assert answers["fakelib.core.Engine.step"] == source.signature(HOST, PY, "fakelib.core.Engine.step",
                                                                   path_extra=extra)
    missing = answers["fakelib.core:Engine.nope"]
    assert isinstance(missing, SourceError) and "nope" in str(missing)


def test_signature_of_functions_and_init(extra: list[str]) -> None:
    sig = source.signature(HOST, PY, "fakelib.core:Engine", path_extra=extra)
    assert [(p.name, p.kind, p.has_default) for p in sig.params] == [
        ("config", "positional_or_keyword", False),
        ("verbose", "keyword_only", True),
        ("extra", "var_keyword", False),
    ]
    assert sig.derived_from == "Engine.__init__" and sig.accepts_any_keyword
    step = source.signature(HOST, PY, "fakelib.core.Engine.step", path_extra=extra)
    assert [p.kind for p in step.params] == ["positional_only", "positional_or_keyword"]
    assert step.params[1].default_src == "1.0" and step.returns_src == "list[int]"
    free = source.signature(HOST, PY, "fakelib.core:make_engine", path_extra=extra)
    retries = free.param("retries")
    assert retries is not None and retries.annotation_src == "int" and retries.kind == "keyword_only"
    assert source.signature(HOST, PY, "fakelib.core:Engine.version", path_extra=extra).params == ()
    inherited = source.signature(HOST, PY, "fakelib.core:Runner", path_extra=extra)
    assert [p.name for p in inherited.params] == ["model", "device"]
    assert inherited.derived_from == "BaseRunner.__init__"


def test_signature_of_record_classes(extra: list[str]) -> None:
    def shape(target: str) -> list[tuple[str, str, bool]]:
        sig = source.signature(HOST, PY, target, path_extra=extra)
        return [(p.name, p.kind[:3], p.has_default) for p in sig.params]

    assert shape("fakelib.core:Request") == [
        ("request_id", "pos", False),
        ("prompt", "pos", True),
        ("priority", "pos", True),
        ("lora", "key", True),
    ]
    assert shape("fakelib.core:ChildRequest") == [
        ("request_id", "pos", False),
        ("prompt", "pos", True),
        ("priority", "pos", True),
        ("lora", "key", True),
        ("extra", "pos", True),
    ]
    assert shape("fakelib.core:Settings") == [("name", "key", False), ("retries", "key", True)]
    assert shape("fakelib.core:Msg") == [("a", "key", False), ("b", "key", True)]
    assert shape("fakelib.core:ModelConfig") == [("model", "pos", True), ("max_len", "pos", False)]
    prompt = source.signature(HOST, PY, "fakelib.core:Request", path_extra=extra).param("prompt")
    assert prompt is not None and prompt.default_src == "<factory list>"


def test_call_sites_of_names_and_methods(lib: Path, extra: list[str]) -> None:
    sites = source.call_sites(HOST, PY, "fakelib", "Engine", path_extra=extra)
    assert [(Path(s.path).name, s.keywords) for s in sites] == [
        ("core.py", (("verbose", "True"),)),
        ("core.py", (("verbose", "verbose"),)),
    ]
    assert sites[0].args_src == ("n",) and sites[0].source_line.startswith("out = Engine(")
    method = source.call_sites(HOST, PY, "fakelib", "execute_model", path_extra=extra)
    assert [(m.func_text, m.keywords) for m in method] == [("self.execute_model", (("batch", "out"),))]
    assert len(source.call_sites(HOST, PY, "fakelib", "Engine", max_sites=1, path_extra=extra)) == 1


def test_class_members_include_inherited(extra: list[str]) -> None:
    members = {m.name: m for m in source.class_members(HOST, PY, "fakelib.core:Engine", path_extra=extra)}
    kinds = {name: m.kind for name, m in members.items()}
    assert kinds == {
        "__init__": "method",
        "step": "method",
        "ready": "property",
        "build": "classmethod",
        "version": "staticmethod",
        "config": "attribute",
        "steps": "attribute",
    }
    build = members["build"].signature
    assert build is not None and [p.name for p in build.params] == ["name"]
    runner = {m.name: m for m in source.class_members(HOST, PY, "fakelib.core:Runner", path_extra=extra)}
    assert runner["run"].owner == "fakelib.core:Runner"
    assert runner["execute_model"].owner == "fakelib.base:BaseRunner"
    assert runner["model"].kind == "attribute"


def test_returns_of_skips_nested_functions(extra: list[str]) -> None:
    returns = source.returns_of(HOST, PY, "fakelib.core:Engine.step", path_extra=extra)
    assert returns == ["[]", "[x * scale for x in batch]"]


def test_locate_definitions_finds_moved_names(lib: Path, extra: list[str]) -> None:
    found = source.locate_definitions(HOST, PY, "fakelib", "relocated_helper", path_extra=extra)
    assert [(f.module, f.kind, f.start) for f in found] == [("fakelib.sub.moved", "def", 1)]
    assert source.locate_definitions(HOST, PY, "fakelib", "absent_name", path_extra=extra) == []


def test_grep_and_view(lib: Path) -> None:
    hits = source.grep(HOST, str(lib), r"def (load|execute_model)\(", python=PY)
    assert [(Path(h.path).name, h.lineno) for h in hits] == [("base.py", 5), ("base.py", 8)]
    assert len(source.grep(HOST, str(lib), "return", max_hits=2, python=PY)) == 2
    with pytest.raises(SourceError, match="bad regular expression"):
        source.grep(HOST, str(lib), "(", python=PY)
    shown = source.view(HOST, str(lib / "base.py"), 2, 3)
    assert shown.lines == (
        (2, '    def __init__(self, model: str, device: str = "cpu"):'),
        (3, "        self.model = model"),
    )
    assert shown.text.splitlines()[0].startswith("2  ")
    clamped = source.view(HOST, str(lib / "base.py"), 8, 500)
    assert clamped.end == clamped.total_lines == 9


def test_missing_python_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="did not answer the source probe"):
        source.site_packages(HOST, "/nonexistent/bin/python")


def test_real_venv_site_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run([PY, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    venv_python = str(tmp_path / "venv" / "bin" / "python")
    sites = source.site_packages(HOST, venv_python)
    venv_site = next(s for s in sites if s.startswith(str(tmp_path)))
    shutil.copytree(write_fake_lib(tmp_path / "build"), Path(venv_site) / "fakelib")
    assert source.module_path(HOST, venv_python, "fakelib.core") == f"{venv_site}/fakelib/core.py"
    sig = source.signature(HOST, venv_python, "fakelib.core:Request")
    assert sig.path.startswith(venv_site) and sig.param("request_id") is not None
    # The caller's folder must not shadow the installed copy.
    monkeypatch.chdir(tmp_path / "build")
    assert source.module_path(HOST, venv_python, "fakelib").startswith(venv_site)
