"""50 broken candidate patches, on both hosts: syntax errors, stale context, paths outside the roots, ``..``
escapes, symlink tricks, and multi-file patches with one bad file. None may be written: the bytes of every
file stay as they were and the ledger records no patch as applied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from tests.fixtures_fake import record_figure
from tools.errors import PatchError
from tools.host import Host
from tools.patches import FilePatch, Patch, apply_patch, ledger_entries, make_patch, sha256, unified_diff

GOOD = "import fakelib\n\n\ndef run(x):\n    return fakelib.compute(x, mode='a', legacy=True)\n"
Maker = Callable[[Host, Path], Patch]


def lay_out(root: Path) -> dict[str, Path]:
    site, work, outside = root / "site", root / "work", root / "outside"
    for folder in (site / "pkg", work, outside, root / "site-evil"):
        folder.mkdir(parents=True)
    for i in range(3):
        (site / "pkg" / f"m{i}.py").write_text(GOOD.replace("x)", f"x{i})"))
    (outside / "secret.py").write_text("TOKEN = 'x'\n")
    (root / "site-evil" / "m.py").write_text("EVIL = 1\n")  # shares a prefix with a root
    (site / "pkg" / "link.py").symlink_to(outside / "secret.py")
    (site / "pkg" / "linkdir").symlink_to(outside, target_is_directory=True)
    (site / "pkg" / "self.py").symlink_to(site / "pkg" / "m0.py")
    return {"site": site, "work": work, "outside": outside, "m0": site / "pkg" / "m0.py",
            "m1": site / "pkg" / "m1.py", "m2": site / "pkg" / "m2.py"}


def forged(path: str, before: str, after: str, *, sha_before: str | None = None) -> Patch:
    """A patch object made by hand (as a buggy repair or a model could), not by make_patch."""
    diff = unified_diff(path, before, after)
    fp = FilePatch(path=path, diff=diff, sha256_before=sha_before or sha256(before.encode()),
                   sha256_after=sha256(after.encode()))
    return Patch(id=hashlib.sha256(diff.encode()).hexdigest()[:16], files=(fp,), rationale="t", origin="test")


def multi(good: Patch, bad: Patch) -> Patch:
    return Patch(id=hashlib.sha256((good.id + bad.id).encode()).hexdigest()[:16], files=good.files + bad.files,
                 rationale="t", origin="test")


def makers(p: dict[str, Path]) -> list[tuple[str, Maker]]:
    m0, m1 = str(p["m0"]), str(p["m1"])
    text = GOOD.replace("x)", "x0)")
    out: list[tuple[str, Maker]] = []
    syntax = ["def run(x:\n", "    return (\n", "return = 1\n", "\x00\n", "def f():\nreturn 1\n",
              "if True\n    pass\n", "x = [1, 2\n", "class :\n", "lambda: yield\n", "  bad_dedent = 1\n"]
    for i, bad in enumerate(syntax):
        out.append((f"syntax-{i}", lambda h, r, bad=bad: make_patch(h, {m0: text + bad}, rationale="t", origin="t")))  # type: ignore[misc]
    stale_texts = [text.replace("mode='a'", "mode='b'"), "# new first line\n" + text, text + "# tail\n",
                   text.replace("\n", "\r\n"), text.upper()]
    for i, other in enumerate(stale_texts):  # made against another version of the file than the one on disk
        out.append((f"stale-sha-{i}", lambda h, r, o=other: forged(m0, o, o.replace("legacy", "legacy2"))))  # type: ignore[misc]
    for i in range(5):  # the right sha256_before, hunks at a wrong line / with wrong context
        def wrong_context(h: Host, r: Path, i: int = i) -> Patch:
            before = text
            moved = ("\n" * (i + 1)) + text
            patch = forged(m0, moved, moved.replace("legacy=True", "legacy=False"))
            return patch.model_copy(update={"files": (patch.files[0].model_copy(
                update={"sha256_before": sha256(before.encode())}),)})
        out.append((f"stale-context-{i}", wrong_context))
    outside = str(p["outside"] / "secret.py")
    targets = [outside, str(r_evil(p)), "/etc/hostname", "/etc/passwd", str(p["site"].parent / "x.py")]
    out += [(f"outside-{i}", lambda h, r, path=path: make_patch(h, {path: "TOKEN = 'y'\n"}, rationale="t",  # type: ignore[misc]
                                                                 origin="t"))
            for i, path in enumerate(targets) if Path(path).exists()]
    while len([n for n, _ in out if n.startswith("outside")]) < 10:
        k = len(out)
        out.append((f"outside-forged-{k}", lambda h, r, path=f"/etc/medic-nope-{k}.py": forged(path, "a\n", "b\n")))  # type: ignore[misc]
    dots = [f"{p['site']}/pkg/../../outside/secret.py", f"{p['site']}/../outside/secret.py",
            f"{p['work']}/../outside/secret.py", f"{p['site']}/pkg/../../site-evil/m.py",
            f"{p['site']}/../../../../../../etc/hostname"]
    for i, path in enumerate(dots):
        before = Path(path).resolve().read_text() if Path(path).resolve().exists() else "a\n"
        out.append((f"dotdot-{i}", lambda h, r, path=path, b=before: forged(path, b, b + "x = 1\n")))  # type: ignore[misc]
    for i, path in enumerate(dots):  # the same escapes written relative, as a model might
        rel = path.replace(str(p["site"]), "site").replace(str(p["work"]), "work")
        out.append((f"dotdot-rel-{i}", lambda h, r, path=rel: forged(path, "a\n", "b\n")))  # type: ignore[misc]
    links = [str(p["site"] / "pkg" / "link.py"), str(p["site"] / "pkg" / "linkdir" / "secret.py")]
    for i, path in enumerate(links):
        out.append((f"symlink-{i}", lambda h, r, path=path: forged(path, "TOKEN = 'x'\n", "TOKEN = 'y'\n")))  # type: ignore[misc]
    def good0(h: Host, r: Path) -> Patch:
        return make_patch(h, {m0: text.replace("legacy=True", "legacy=False")}, rationale="t", origin="t")

    self_link = str(p["site"] / "pkg" / "self.py")
    out.append(("symlink-twice", lambda h, r: multi(good0(h, r), forged(
        self_link, text, text.replace("legacy=True", "legacy=False")))))
    for i, path in enumerate(links):  # one good file, then a bad one: all or nothing
        out.append((f"multi-symlink-{i}", lambda h, r, path=path: multi(  # type: ignore[misc]
            make_patch(h, {m1: GOOD.replace("x)", "x1)") + "# ok\n"}, rationale="t", origin="t"),
            forged(path, "TOKEN = 'x'\n", "TOKEN = 'y'\n"))))
    for i, bad in enumerate(syntax[:5]):
        out.append((f"multi-syntax-{i}", lambda h, r, bad=bad: multi(  # type: ignore[misc]
            make_patch(h, {m1: GOOD.replace("x)", "x1)") + "# ok\n"}, rationale="t", origin="t"),
            make_patch(h, {str(p["m2"]): GOOD.replace("x)", "x2)") + bad}, rationale="t", origin="t"))))
    return out[:50]


def r_evil(p: dict[str, Path]) -> Path:
    return p["site"].parent / "site-evil" / "m.py"


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(f): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file() and not f.is_symlink()}


def test_fifty_broken_candidates_write_nothing(host: Host, tmp_path: Path) -> None:
    paths = lay_out(tmp_path)
    roots = [str(paths["site"]), str(paths["work"])]
    ledger = str(paths["work"] / ".medic" / "s-x" / "patches")
    cases = makers(paths)
    assert len(cases) == 50
    etc = {p: Path(p).read_bytes() for p in ("/etc/hostname", "/etc/passwd") if Path(p).exists()}
    before = snapshot(tmp_path)
    refused, written, crashed = 0, [], []
    for name, make in cases:
        try:
            patch = make(host, tmp_path)
        except PatchError:
            refused += 1  # refused while being made: nothing could be written either
            continue
        try:
            apply_patch(host, patch, roots=roots, ledger_dir=ledger)
            written.append(name)
        except PatchError:
            refused += 1
        except Exception as exc:  # any other error is a crash of the patch tool
            crashed.append(f"{name}: {type(exc).__name__}: {exc}")
        if snapshot(tmp_path) != before:
            written.append(name)
            break
    changed = [f for f, data in snapshot(tmp_path).items() if before.get(f) != data]
    changed += [p for p, data in etc.items() if Path(p).read_bytes() != data]
    applied = [e.patch_id for e in ledger_entries(host, ledger) if e.state == "applied"]
    where = "ssh" if "@" in host.name else host.name
    record_figure(f"broken candidate patches ({where})", survived=refused, total=len(cases),
                  policy_escapes=len(set(written)) + len(applied), partial_writes=len(changed))
    assert not written and not applied and not crashed, (written, applied, crashed)
    assert changed == [] and refused == len(cases)
