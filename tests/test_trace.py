"""Traces read back: replay of a real session, the postmortem (markdown and HTML page), bad traces, secrets.

tests/data/traces/lab_session.jsonl is a real trace of a full lab session (a medic crash and resume, then
8 faults fixed, then verified). The HTML page is rendered by headless Chromium and its screenshot checked.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from agent.readers.postmortem import postmortem_markdown
from agent.readers.postmortem_html import postmortem_html
from agent.readers.postmortem_summary import summarize
from agent.readers.replay import replay
from agent.readers.tracefile import read_trace
from agent.record.trace import TraceWriter
from tests.fixtures_replay import replay_exempt
from tools.errors import TraceError
from tools.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "traces" / "lab_session.jsonl"
SECRET = "sk-test-abcdefghijklmnopqrstuv"
ENV_SECRET = "hunter2-value-XYZ"


def medic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / ".venv" / "bin" / "medic"), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


# -- replay ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("trace", sorted((ROOT / "tests" / "data" / "traces").glob("lab_session*.jsonl")),
                         ids=lambda p: p.name)
def test_replay_of_the_real_sessions_finds_no_divergence(trace: Path) -> None:
    """Every committed real session (plain; with the static scan) replays with today's decisions."""
    result = replay(trace)
    assert result.first_divergence is None
    assert result.events_compared >= 30  # every run_end, fault, candidate, apply, verify, check and the exit
    assert result.seconds < 1.0


@pytest.mark.parametrize(("line", "edit", "expected"), [
    # launch L3 crashed: had it "exited", after_watch would have gone to validate, not diagnose
    (30, lambda d: d.update(outcome="exited", exit_code=0), "after_watch chose 'validate'"),
    # the same fingerprint as the fault before it: diagnose would call it repeated
    (31, lambda d: d.update(fingerprint="8104561c7b74bbbe"), "repeated=True"),
    # a session that claims to have ended with one patch fewer than it applied
    (100, lambda d: d["patches"].pop(), "keeps patches"),
])
def test_replay_reports_the_first_divergence(tmp_path: Path, line: int, edit, expected: str) -> None:
    text = lines(REAL)
    record = json.loads(text[line])
    edit(record["data"])
    text[line] = json.dumps(record)
    path = tmp_path / "edited.jsonl"
    path.write_text("\n".join(text) + "\n")
    replay_exempt(path, "edited to diverge")
    result = replay(path)
    assert result.first_divergence is not None
    assert f"line {line + 1}" in result.first_divergence and expected in result.first_divergence


# -- postmortem -----------------------------------------------------------------------------------------
def test_postmortem_markdown_of_the_real_session() -> None:
    trace = read_trace(REAL)
    s = summarize(trace)
    assert len(s.faults) == 8 and len(s.kept) == 8 and len(s.launches) == 10 and s.outcome == "verified"
    assert s.load_wasted > 0 and s.load_spent >= s.load_wasted
    md = postmortem_markdown(trace)
    for part in ("## Timeline", "## Faults", "## Patches", "## Verifications", "## Final diffs", "## What is left",
                 "+                is_encoder_decoder=False,", "caught by a crash after the load",
                 "derived:missing_argument", "[during load]", "[before launch]", "wasted"):
        assert part in md, part
    assert md.count("```diff") == 16  # each patch once, then the final set again


def test_html_escapes_untrusted_text_and_loads_nothing(tmp_path: Path) -> None:
    text = lines(REAL)
    first_fault = next(i for i, line in enumerate(text) if '"kind": "fault"' in line)
    record = json.loads(text[first_fault])
    record["data"]["summary"] = "ValueError: <script>alert(1)</script><img src=x onerror=alert(2)>"
    text[first_fault] = json.dumps(record)
    path = tmp_path / "evil.jsonl"
    path.write_text("\n".join(text) + "\n")
    page = postmortem_html(read_trace(path))
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    tags = re.findall(r"<[a-zA-Z][^>]*>", page)  # trace text is escaped, so every real tag is the page's own
    assert not [t for t in tags if re.search(r"\s(src|href|on\w+)\s*=", t) or t.startswith(("<link", "<script"))]
    assert "@import" not in page and "url(" not in page
    assert '<svg id="timeline"' in page and page.count('class="bar"') == 10
    assert '<span class="add">+                is_encoder_decoder=False,</span>' in page


def png_pixels(data: bytes, max_rows: int) -> tuple[int, int, list[bytes]]:
    """The first ``max_rows`` rows of an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", b""
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat += body
        pos += size + 12
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    assert depth == 8 and ctype in (2, 6) and interlace == 0
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(min(height, max_rows)):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (make system-deps)")
def test_html_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    html, png = tmp_path / "postmortem.html", tmp_path / "shot.png"
    html.write_text(postmortem_html(read_trace(REAL)))
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1200,1600",
                    f"file://{html}"], capture_output=True, timeout=120, check=False)
    assert png.exists() and png.stat().st_size > 10_000
    width, bpp, rows = png_pixels(png.read_bytes(), max_rows=520)  # the header and the timeline
    colours = {row[i:i + 3] for row in rows[::2] for i in range(0, width * bpp, bpp * 2)}
    assert len(colours) > 50

    def near(rgb: tuple[int, int, int]) -> bool:
        return any(all(abs(px[k] - rgb[k]) <= 12 for k in range(3)) for px in colours)

    assert near((0xD3, 0x3C, 0x3C)) and near((0x2E, 0x9E, 0x44))  # crashed and exited bars were drawn


# -- bad traces -----------------------------------------------------------------------------------------
HEADER = json.dumps({"format": "medic-trace", "version": 1, "ts": 1.0, "session": "s", "config": {}, "host": "x"})
BAD = {
    "empty": ("", "empty"),
    "not_json": ("this is not json\n", "not JSON"),
    "not_medic": (json.dumps({"format": "other"}) + "\n", "not a medic trace"),
    "version": (HEADER.replace('"version": 1', '"version": 7') + "\n", "version 7"),
    "middle": (HEADER + "\n{broken\n" + json.dumps({"ts": 2, "kind": "exit", "node": "r", "data": {}}) + "\n",
               "line 2"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_traces_are_refused_with_one_line(tmp_path: Path, name: str) -> None:
    content, words = BAD[name]
    path = tmp_path / f"{name}.jsonl"
    path.write_text(content)
    replay_exempt(path, "not a readable trace, on purpose")
    with pytest.raises(TraceError, match=words) as err:
        read_trace(path)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    page = tmp_path / "page.html"
    runs = [["postmortem", str(path), "--html", str(page)]] + ([["replay", str(path)]] if name == "version" else [])
    for args in runs:  # each is a real process (~3 s): replay shares read_trace, so once is enough
        done = medic(*args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("medic: ") and words in done.stderr
        assert not page.exists() and not list(tmp_path.glob(".page.html.*"))


def test_a_truncated_last_line_is_read_up_to_the_break(tmp_path: Path) -> None:
    text = REAL.read_text()
    cut = text[: text.rindex('"kind": "exit"') + 5]  # the session died writing its exit event
    path = tmp_path / "crashed.jsonl"
    path.write_text(cut)
    replay_exempt(path, "cut mid-line, on purpose")
    trace = read_trace(path)
    assert trace.truncated and "truncated" in (trace.problem or "")
    assert len(trace.events) == 99
    assert "truncated" in postmortem_markdown(trace) and "did not finish" in postmortem_markdown(trace)
    page = tmp_path / "page.html"
    done = medic("postmortem", str(path), "--html", str(page))
    assert done.returncode == 0 and "truncated" in done.stderr and "truncated" in done.stdout
    assert page.exists() and "truncated" in page.read_text()
    # replay compares what was recorded, then says where the trace stops: not a clean replay (was exit 0, silent)
    replayed = medic("replay", str(path))
    assert replayed.returncode == 1 and "no divergence up to where the trace stops at line 100" in replayed.stdout
    assert "truncated" in replayed.stdout and replayed.stdout.count("\n") == 1


def test_a_trace_with_no_exit_event_says_where_it_stops(tmp_path: Path) -> None:
    """medic killed before its exit event: every decision up to there is compared, and replay says it stops."""
    text = lines(REAL)
    path = tmp_path / "killed.jsonl"
    path.write_text("\n".join(text[:60]) + "\n")
    result = replay(path)
    assert result.first_divergence is None and not result.exact and result.events_compared > 10
    assert result.stopped is not None and result.stopped.startswith("the trace stops at line 60 (")
    assert "no exit event" in result.stopped and not result.waits  # killed, not waiting for a person
    assert replay(REAL).exact


def test_cli_on_the_real_trace(tmp_path: Path) -> None:
    page = tmp_path / "pm.html"
    done = medic("postmortem", str(REAL), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# Postmortem: medic session try3") and page.read_text().startswith("<!DOCTYPE")
    done = medic("replay", str(REAL))
    assert done.returncode == 0 and "no divergence" in done.stdout


# -- secrets --------------------------------------------------------------------------------------------
def test_secrets_never_reach_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIC_STRICT_EVENTS")  # a key no payload declares, named like a secret: redacted all the same
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, {"session": "s", "config": {}, "host": "local"}, Redactor([SECRET]))
    writer.event("fault", "diagnose", {"stage": "crash", "summary": f"AuthError: key {SECRET} refused",
                                       "frames": [f"OPENAI_API_KEY={ENV_SECRET} python x.py"]})
    writer.event("warning", "repair", {"message": f"env: OPENAI_API_KEY={ENV_SECRET}", "api_key": "plain-value"})
    writer.close()
    blob = path.read_text()
    assert SECRET not in blob and ENV_SECRET not in blob and "plain-value" not in blob
    assert blob.count("[REDACTED]") >= 4
    trace = read_trace(path)
    assert SECRET not in postmortem_markdown(trace) + postmortem_html(trace)


def test_a_session_that_spends_its_budget_replays_to_the_same_outcome(make_fake) -> None:
    """One launch allowed: the fault is repaired, and the budget stops the session before the relaunch. Replay
    re-decides the stop (budget_stop's outcome) and finds the exit event agrees."""
    from agent.config import Budgets
    from agent.session import run_session

    fake = make_fake(mode="unattended", budgets=Budgets(max_launches=1))
    outcome, values = run_session(fake.config)
    assert outcome == "budget" and len(values["patches"]) == 1
    result = replay(fake.trace_path)
    assert result.first_divergence is None and result.events_compared >= 5
