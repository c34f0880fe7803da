"""The postmortem as ONE self-contained HTML page: inline CSS, an inline SVG timeline, the diffs.

Every string from the trace is untrusted (job logs end up in fault messages), so all of it goes through
html.escape; the page loads nothing: no script, no external URL.
"""

from __future__ import annotations

from html import escape

from agent.answers import answer_line
from agent.readers.postmortem import shortener
from agent.readers.postmortem_answers import answers_of
from agent.readers.postmortem_summary import Summary, rationale, summarize
from agent.readers.tracefile import Trace
from agent.record.people import for_people, without_subject
from agent.record.report import human_seconds

OUTCOME_COLOURS = {"exited": "#2e9e44", "crashed": "#d33c3c", "timeout": "#e08a00"}
STOPPED_COLOUR, UNKNOWN_COLOUR = "#8a5cd1", "#8c8c8c"
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d1d1f;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.outcome{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600}
.verified{background:#2e9e44}.other{background:#d33c3c}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left}
pre{background:#fff;border:1px solid #ddd;padding:8px;overflow-x:auto;font:12px/1.35 monospace}
.add{color:#116b2a;background:#e6f6ea;display:block}.del{color:#9b1c1c;background:#fbe9e9;display:block}
.hunk{color:#5a4fcf;display:block}.warn{color:#9b1c1c}
svg text{font:11px system-ui,sans-serif}
"""


def _colour(outcome: str) -> str:
    if outcome.startswith("stopped"):
        return STOPPED_COLOUR
    return OUTCOME_COLOURS.get(outcome, UNKNOWN_COLOUR)


def timeline_svg(s: Summary, width: int = 1100) -> str:
    """One bar per launch on a shared time axis; red ticks for faults, blue diamonds for applied patches."""
    left, row, top = 90, 26, 30
    span = max(s.duration, max((launch.start + (launch.seconds or 0)) for launch in s.launches) if s.launches else 1.0)
    scale = (width - left - 20) / max(span, 1e-9)
    height = top + row * max(len(s.launches), 1) + 30
    parts = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="launch timeline">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>']
    for tick in range(0, int(span) + 1, max(int(span / 10) or 1, 1)):
        x = left + tick * scale
        parts.append(f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{height - 24}" stroke="#e3e3e3"/>'
                     f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle" fill="#666">{tick}s</text>')
    for launch in s.launches:
        y = top + (launch.seq - 1) * row
        x, w = left + launch.start * scale, max((launch.seconds or 0.5) * scale, 2.0)
        title = escape(f"{launch.kind} launch {launch.seq} (L{launch.n}): {launch.outcome}, "
                       f"{human_seconds(launch.seconds)}, load {human_seconds(launch.load)}")
        name = "canary" if launch.canary else "launch"
        parts.append(f'<text x="4" y="{y + 14}" fill="#333">{name} {launch.seq}</text>'
                     f'<rect class="bar" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 8}" rx="3" '
                     f'fill="{_colour(launch.outcome)}"><title>{title}</title></rect>')
        if launch.load:
            parts.append(f'<rect x="{x:.1f}" y="{y + row - 12}" width="{launch.load * scale:.1f}" height="4" '
                         f'fill="#1d1d1f" opacity="0.35"><title>load {human_seconds(launch.load)}</title></rect>')
    for f in s.faults:
        y = top + ((f.launch.seq - 1) if f.launch else 0) * row
        x = left + f.at * scale
        parts.append(f'<line class="fault" x1="{x:.1f}" y1="{y - 3}" x2="{x:.1f}" y2="{y + row - 5}" '
                     f'stroke="#7a0000" stroke-width="3"><title>{escape(f"fault {f.seq}: {f.said}")}</title></line>')
    for p in s.patches:
        if p.state in ("proposed", "rejected"):  # never on disk: no mark on the timeline
            continue
        before = [launch for launch in s.launches if launch.start <= p.at]
        mid = top + ((before[-1].seq - 1) if before else 0) * row + (row - 8) / 2
        x = left + p.at * scale
        fill = "#1f5fbf" if p.state == "applied" else "#e08a00"
        parts.append(f'<path class="patch" d="M{x:.1f} {mid - 7:.1f} l6 7 l-6 7 l-6 -7 z" fill="{fill}">'
                     f'<title>{escape(f"patch {p.id} ({p.origin}): {p.state}")}</title></path>')
    parts.append("</svg>")
    return "".join(parts)


def diff_html(diff: str) -> str:
    out = []
    for line in diff.rstrip("\n").splitlines():
        cls = ("hunk" if line.startswith("@@") else "" if line.startswith(("+++", "---"))
               else "add" if line.startswith("+") else "del" if line.startswith("-") else "")
        text = escape(line) or " "
        out.append(f'<span class="{cls}">{text}</span>' if cls else text + "\n")
    return '<pre class="diff">' + "".join(out) + "</pre>"


def postmortem_html(trace: Trace) -> str:
    s, sh = summarize(trace), shortener(trace)
    e, loads = escape, s.loads()
    body = [f"<h1>Postmortem: medic session {e(s.session)}</h1>",
            f'<p><span class="outcome {"verified" if s.outcome == "verified" else "other"}">{e(s.outcome)}</span> '
            f"{e(for_people(s.detail, sh))}</p>",
            f"<p>{human_seconds(s.duration)} wall clock, {len(s.launches)} launch(es), {len(s.faults)} fault(s), "
            f"{len(s.kept)} patch(es) kept.</p>", *([f"<p>{e('; '.join(loads))}.</p>"] if loads else [])]
    if s.problem:
        body.append(f'<p class="warn">{e(s.problem)}</p>')
    body += [f'<p class="warn">warning: {e(for_people(w, sh))}</p>' for w in s.warnings]
    body += ["<h2>Timeline</h2>", timeline_svg(s),
             "<table><tr><th>#</th><th>kind</th><th>start</th><th>time</th><th>phases</th><th>outcome</th></tr>"]
    for launch in s.launches:
        phases = ", ".join(f"{k} @{human_seconds(v)}" for k, v in launch.phases.items()) or "-"
        body.append(f"<tr><td>{launch.seq} (L{launch.n})</td><td>{e(launch.kind)}</td>"
                    f"<td>+{human_seconds(launch.start)}</td><td>{human_seconds(launch.seconds)}</td>"
                    f"<td>{e(phases)}</td><td>{e(launch.outcome)}</td></tr>")
    body += ["</table>", "<h2>Faults</h2>", f"<p>{e(s.caught_counts())}</p>",
             "<table><tr><th>#</th><th>stage</th><th>root cause</th><th>where</th><th>caught</th></tr>"]
    for f in s.faults:
        body.append(f"<tr><td>{f.seq}</td><td>{e(f.stage)}</td><td>{e(sh.text(f.said))}</td>"
                    f"<td>{e(sh.text(f.frames[-1]) if f.frames else '')}</td><td>{e(f.caught)}</td></tr>")
    body += ["</table>", "<h2>Patches</h2>"]
    for p in s.patches:
        fault = f" for fault {p.fault.seq}" if p.fault else ""
        body += [f"<h3>{e(p.id)} — {e(p.origin)}{fault}: {e(p.state)}</h3>",
                 f"<p>{e(rationale(p))}</p>", diff_html(p.diff)]
    answers = answers_of(trace)  # who answered what, when, why, and the diff answered (agent/answers.py)
    body += ["<h2>Questions and answers</h2>", "<ol>"] if answers else []
    for a in answers:
        said = answer_line(a, lambda text: for_people(text, sh), bold="")  # the markdown's own line
        body += [f"<li>{e(said)}{diff_html(str(a.get('diff') or ''))}</li>"]
    body += ["</ol>"] if answers else []
    body += ["<h2>Verifications</h2>", "<ul>"]
    for c in s.checks:
        check = str(c.get("check", ""))
        detail = for_people(without_subject(check, str(c.get("detail", ""))), sh, check.split())
        body.append(f"<li>{'ok' if c.get('ok') else '<b>FAILED</b>'} [{e(str(c.get('when', '')))}] "
                    f"{e(sh.text(check))}: {e(detail[:200])}</li>")
    body += ["</ul>", "<h2>Final diffs (applied, not reverted)</h2>",
             *([diff_html(p.diff) for p in s.kept] or ["<p>(none)</p>"]),
             "<h2>What is left</h2>",
             f"<p>{e(for_people(s.detail, sh)) if s.outcome != 'verified' else 'nothing: the output was verified.'}"
             "</p>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>medic postmortem {e(s.session)}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
