"""One session trace as the figures bench/gpu/RESULTS.md records: exit, launches (target/canary), faults, patches,
env remedies, wall. Runs on the device (in medic's venv) and here on any trace.

python bench/gpu/summarize.py TRACE.jsonl [--exit N] [--wall SECONDS] [--log medic.log] [--probe setup.log]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def events(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line: the rest still counts
    return out


def summary(trace: list[dict], exit_code: str, wall: str) -> list[str]:
    kinds = collections.Counter(e.get("kind") for e in trace)
    launches = collections.Counter(e["data"].get("kind", "?") for e in trace if e.get("kind") == "launch")
    lines = [f"- exit: {exit_code}; wall: {wall} s",
             f"- launches: target {launches.get('target', 0)}, canary {launches.get('canary', 0)}"
             f" ({dict(launches)})",
             f"- events: {dict(sorted((k, v) for k, v in kinds.items() if k))}"]
    faults = [e["data"] for e in trace if e.get("kind") == "fault"]
    lines.append(f"- faults: {len(faults)}")
    lines += [f"  - [{f.get('stage')}] {str(f.get('summary', ''))[:200]}" for f in faults]
    applied = [e["data"] for e in trace if e.get("kind") == "applied"]
    env = [a for a in applied if str(a.get("origin", "")).startswith("derived:env") or a.get("env")]
    lines.append(f"- patches applied: {len(applied) - len(env)}; env remedies: {len(env)}")
    lines += [f"  - {a.get('origin')}: {str(a.get('rationale', ''))[:200]}" for a in applied]
    ends = [e["data"] for e in trace if e.get("kind") == "run_end"]
    lines += [f"- run_end: launch {d.get('launch')} {d.get('outcome')} exit {d.get('exit_code')} "
              f"in {d.get('seconds')} s" for d in ends]
    lines += [f"- exit event: {json.dumps(e['data'])[:300]}" for e in trace if e.get("kind") == "exit"]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", type=Path)
    parser.add_argument("--exit", default="?")
    parser.add_argument("--wall", default="?")
    parser.add_argument("--log", type=Path)
    parser.add_argument("--probe", type=Path)
    args = parser.parse_args()
    if not args.trace.is_file():
        print(f"summarize: no trace at {args.trace}", file=sys.stderr)
        return 2
    print(f"# medic on the device: {args.trace.name}\n")
    print("\n".join(summary(events(args.trace), args.exit, args.wall)))
    for title, path in (("setup", args.probe), ("medic's console (last 40 lines)", args.log)):
        if path and path.is_file():
            tail = path.read_text(errors="replace").splitlines()[-40:]
            print(f"\n## {title}\n\n```\n" + "\n".join(tail) + "\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
