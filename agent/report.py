"""The session report as markdown, from the graph state alone (so replay and postmortem can render it too)."""

from __future__ import annotations

from agent.config import SessionConfig
from agent.state import SessionState


def render_report(state: SessionState, config: SessionConfig) -> str:
    launches = state.get("launches") or []
    faults = state.get("faults") or []
    patches = state.get("patches") or []
    out = [f"# medic session {config.session_id}", "",
           f"**Outcome: {state.get('outcome') or 'unfinished'}** — {state.get('outcome_detail') or ''}", "",
           f"- target: `{' '.join(config.target.command)}` on {config.target.host}",
           f"- launches: {len(launches)} (budget {config.budgets.max_launches})",
           f"- faults: {len(faults)}, patches kept: {len(patches)}", ""]
    versions = (state.get("preflight") or {}).get("versions") or {}
    if versions:
        out += ["- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), ""]
    out += ["## Faults, in order", ""]
    for i, fault in enumerate(faults, 1):
        frames = fault.get("frames") or []
        where = f" at `{frames[-1]['file'].split('site-packages/')[-1]}:{frames[-1]['line']}`" if frames else ""
        proc = f" in `{fault['proc']}`" if fault.get("proc") else ""
        first = (fault.get("message") or "").strip().splitlines()[:1]
        out.append(f"{i}. [{fault.get('stage')}] launch {fault.get('launch') or '-'}: "
                   f"`{fault.get('exc_type')}: {first[0] if first else ''}`{proc}{where}")
    out += ["", "## Patches", ""]
    for p in patches:
        out += [f"### {p['patch']['id']} ({p['origin']})", "", p["rationale"], ""]
        if p.get("evidence"):
            out += ["Evidence read:", "", *[f"- `{e[:200]}`" for e in p["evidence"]], ""]
        out += ["```diff", "".join(f["diff"] for f in p["patch"]["files"]).rstrip(), "```", ""]
    out += ["## Launches", "", "| # | outcome | exit | seconds | load s | phases |", "|---|---|---|---|---|---|"]
    for launch in launches:
        secs = (launch.get("ended") or 0) - (launch.get("started") or 0)
        phases = ", ".join(f"{k} @{v:.0f}s" for k, v in (launch.get("phases") or {}).items())
        out.append(f"| {launch.get('n')} | {launch.get('outcome')} | {launch.get('exit_code')} | "
                   f"{max(secs, 0):.1f} | {launch.get('load_seconds') or '-'} | {phases} |")
    checks = state.get("verifications") or []
    if checks:
        out += ["", "## Verifications", ""]
        out += [f"- {'ok' if v['ok'] else 'FAILED'} [{v['when']}] {v['check']}: {v['detail'][:160]}" for v in checks]
    if state.get("outcome") != "verified":
        out += ["", "## What is left", "", state.get("outcome_detail") or "the session did not finish"]
    return "\n".join(out) + "\n"
