"""What the OUTERMOST callable accepts, layer by layer (decorators, partials, ``__signature__``, ``__new__``,
metaclass ``__call__``, dataclass and pydantic constructors), asked of the real lab python through the source
probe — and checked against real calls in that same python: a "rejects" verdict must meet a real rejection,
an "accepts" verdict a real call that binds."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from lab.build import LabPaths
from tools import source
from tools.host import LocalHost

LAYERS = '''
import functools
import inspect
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass


def retrying(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tries = kwargs.pop("max_retries", 1)
        for _ in range(tries):
            return fn(*args, **kwargs)
    return wrapper


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("calling", fn.__name__)
        return fn(*args, **kwargs)
    return wrapper


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, budget=1.0, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


def traced(label):
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper
    return decorate


REGISTRY = {}


def register(fn):
    REGISTRY[fn.__name__] = fn
    return fn


@retrying
def fetch(url, timeout=1.0):
    return url


@logged
def send(url, timeout=1.0):
    return url


@timed
def poll(url):
    return url


@traced("x")
@register
def stamp(url):
    return url


def plain(url, timeout=1.0):
    return url


quick = functools.partial(plain, timeout=0.1)
bound = functools.partial(plain, "http://bound")


def flexible(*args, **kwargs):
    return plain(*args, **kwargs)


flexible.__signature__ = inspect.signature(plain)


class Point:
    def __new__(cls, x, y=0):
        return super().__new__(cls)


class Sized:
    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, size):
        self.size = size


class Tracing(type):
    def __call__(cls, *args, **kwargs):
        kwargs.pop("trace", None)
        return super().__call__(*args, **kwargs)


class Service(metaclass=Tracing):
    def __init__(self, name):
        self.name = name


class Strict(type):
    def __call__(cls, value):
        return super().__call__(value)


class Code(metaclass=Strict):
    def __init__(self, value, extra=None):
        self.value = value


class Loose(BaseModel):
    name: str = "a"


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: int = Field(0, alias="label")


class ClosedByName(Closed):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


@dataclass
class Record:
    name: str = "a"
    cache: dict = field(init=False, default_factory=dict)


@pydantic_dataclass
class LooseRecord:
    name: str = "a"
'''

# (callable, keyword, positional args for a call that otherwise binds, the probe's proven verdict)
CASES = [
    ("fetch", "max_retries", ["u"], None),  # the wrapper consumes it: inspect.signature would say "rejects"
    ("fetch", "bogus", ["u"], None),
    ("send", "bogus", ["u"], True),  # a forwarding wrapper rejects what the inner def rejects
    ("send", "timeout", ["u"], False),
    ("poll", "budget", ["u"], False),  # the wrapper's own keyword-only parameter
    ("poll", "bogus", ["u"], True),
    ("stamp", "bogus", ["u"], True),  # a factory's forwarding wrapper over a registry
    ("quick", "timeout", ["u"], False),
    ("quick", "bogus", ["u"], True),
    ("bound", "url", [], True),  # bound positionally by the partial: "multiple values"
    ("flexible", "bogus", ["u"], None),  # __signature__ set by hand over *args/**kwargs
    ("Point", "z", [1], True),
    ("Point", "y", [1], False),
    ("Sized", "bogus", [1], True),  # a __new__ that binds nothing of its own: __init__ decides
    ("Service", "trace", ["s"], None),  # the metaclass __call__ pops it
    ("Code", "extra", [1], True),  # the metaclass __call__ takes only value
    ("Loose", "bogus", [], False),  # pydantic ignores extras by default
    ("Closed", "bogus", [], True),
    ("Closed", "name", [], True),  # only the alias is a keyword
    ("Closed", "label", [], False),
    ("ClosedByName", "name", [], False),
    ("Record", "bogus", [], True),
    ("Record", "cache", [], True),  # field(init=False)
    ("LooseRecord", "bogus", [], False),
    ("enum:Enum", "bogus", [1], True),  # the stdlib's own metaclass __call__, read from its source
]

CALL = '''
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
out = []
for target, keyword, args in json.loads(sys.argv[2]):
    module, _, name = target.rpartition(":")
    obj = getattr(importlib.import_module(module or "layers"), name)
    try:
        obj(*args, **{keyword: 1})
        out.append("accepted")
    except Exception as exc:
        out.append("rejected" if keyword in str(exc) else "other: " + str(exc)[:200])
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def verdicts(lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, bool | None, str]]:
    folder = tmp_path_factory.mktemp("layers")
    (folder / "layers.py").write_text(textwrap.dedent(LAYERS))
    host, python = LocalHost(), str(lab.python)
    sigs = {t: source.signature(host, python, t if ":" in t else f"layers:{t}", path_extra=[str(folder)])
            for t in dict.fromkeys(t for t, *_ in CASES)}
    calls = [[t, k, args] for t, k, args, _ in CASES]
    real = subprocess.run([python, "-c", CALL, str(folder), json.dumps(calls)], capture_output=True, text=True,
                          timeout=120, check=True)
    outcomes = json.loads(real.stdout.strip().splitlines()[-1])
    return [(t, k, sigs[t].rejects_keyword(k), o) for (t, k, _, _), o in zip(CASES, outcomes, strict=True)]


def test_each_layer_gives_the_proven_verdict(verdicts: list[tuple[str, str, bool | None, str]]) -> None:
    got = [(t, k, v) for t, k, v, _ in verdicts]
    assert got == [(t, k, expected) for t, k, _, expected in CASES]


def test_every_verdict_meets_the_real_call(verdicts: list[tuple[str, str, bool | None, str]]) -> None:
    for target, keyword, verdict, outcome in verdicts:
        if verdict is True:
            assert outcome == "rejected", (target, keyword, outcome)
        elif verdict is False:
            assert outcome == "accepted", (target, keyword, outcome)
    # the trap itself: the wrapper really takes max_retries, though inspect.signature(fetch) does not show it
    assert ("fetch", "max_retries", None, "accepted") in verdicts


def test_an_unreadable_layer_says_why(lab: LabPaths, tmp_path: Path) -> None:
    (tmp_path / "layers.py").write_text(textwrap.dedent(LAYERS))
    sig = source.signature(LocalHost(), str(lab.python), "layers:fetch", path_extra=[str(tmp_path)])
    assert not sig.exact and sig.unknown and "max_retries" not in sig.unknown and "kwargs" in sig.unknown
    assert [p.name for p in sig.params] == ["url", "timeout"]  # the inner def, still shown to the reader
