"""The library's own other way, taken by an option of the job's command: the failing call is reached only because
a host-dependent choice took one branch for the job's settings.

vLLM's CPU attention picks its kernel from the dtype, the KV block size and the head size (and the host's CPU
flags): on a host with AMX tiles bf16 with a block size divisible by 32 takes the AMX kernel, which a build may not
have for the model's head size ("Unsupported CPU attention configuration: head_dim=64 isa=0"). As with the
NUMA-binding fault (agent/repair/derived_env_branch.py), the cure is the library's own code taking another branch:
the failing frame's call passes what a choice function answered (agent/repair/option_choice.py), its inputs were
read from config fields the job sets on its command line, and the target env, with the job's environment, says
which value of one of those options gets another answer (agent/repair/option_probe.py). The remedy sets that option
on the job's command (on the server's, for a two-process job), through approve: it changes what the job runs.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from typing import Any, Literal

from agent.repair.context import candidate, module_of, read_source
from agent.repair.option_choice import Choice, choice_at
from agent.repair.option_keyword import KeywordSite, keyword_sites
from agent.repair.option_probe import PROBE, run_probe
from agent.repair.types import Candidate, Fault, FrameRef, RepairContext
from tools.diffs import ArgEdit, arg_patch

ORIGIN = "derived:option:other_branch"
ORIGIN_KEYWORD = "derived:option:keyword"  # an in-process job: the keyword of its own call, a file patch
NAMED = re.compile(r"\b([a-z_]\w*)=([\w.]+)")  # "head_dim=64", "dtype=torch.bfloat16": what a message or log names


def option_branch_remedy(ctx: RepairContext, fault: Fault) -> list[Candidate]:
    for frame in reversed(fault.frames):  # the innermost library frame first
        if ctx.is_fixable(frame.file) or not frame.file.endswith(".py"):
            continue
        module = module_of(ctx, frame.file)
        src = read_source(ctx, frame.file) if module else None
        choice = choice_at(src.tree, frame.line) if src else None
        if module is None or choice is None or not choice.inputs:
            continue
        command = ctx.server_command or ctx.job_command
        # an in-process job sets the fields in its code: the keywords of its calls into the library
        sites = {} if library_cli(command, ctx.library_packages) else {
            i.field: found[0] for i in choice.inputs if (found := keyword_sites(ctx, i.field))}
        answer = ask(ctx, module, choice, fault, {f: str(s.value) for f, s in sites.items() if s.value is not None})
        # the choice is this one: its other answers, or none when no setting the job controls changes it
        out = []
        for way in answer.get("ways") or ():
            if takes_option(command, way["option"], ctx.library_packages):
                out.append(remedy(ctx, frame, choice, answer, way))
            elif way["field"] in sites:
                out.append(keyword_remedy(ctx, frame, choice, answer, way, sites[way["field"]]))
        return out
    return []


def takes_option(command: Sequence[str], option: str, libraries: Sequence[str]) -> bool:
    """Whether the option can go on the command: it gives the option already, or it is a library's own CLI. A
    driver's own argparse would refuse an option it does not declare: there the setting is a keyword of the
    driver's engine call, not an option of its command (agent/repair/option_keyword.py)."""
    return any(arg == option or arg.startswith(option + "=") for arg in command) or library_cli(command, libraries)


def library_cli(command: Sequence[str], libraries: Sequence[str]) -> bool:
    """The command runs a library's own CLI: its console script, or ``python -m`` its module."""
    program = [posixpath.basename(arg) for arg in command[:1]]
    module = command[command.index("-m") + 1] if "-m" in command[:-1] else ""
    return bool(set(program) & set(libraries)) or module.split(".")[0] in libraries


def remedy(ctx: RepairContext, frame: FrameRef, choice: Choice, answer: dict[str, Any], way: dict[str, str]
           ) -> Candidate:
    which: Literal["job", "server"] = "server" if ctx.server_command else "job"
    inputs = ", ".join(f"{k}={v}" for k, v in answer["inputs"].items())
    why = (f"{frame.file}:{frame.line} passes self.{choice.chosen}, which {choice.function}() chose: "
           f"{answer['now']!r} for {inputs} on this host; with {way['option']} {way['value']} (now {way['current']}) "
           f"the library's own code takes another way, {way['answer']!r}: set it on the {which}'s command for "
           "medic's launches (the library and the job's files are left alone)")
    evidence = (f"{frame.file}:{choice.call_line}: self.{choice.chosen} = {choice.function}(...)",
                f"{frame.file}:{choice.line}: {choice.function}({inputs}) -> {answer['now']!r}; "
                f"{way['option']} {way['value']} -> {way['answer']!r}")
    edit = ArgEdit(option=way["option"], value=way["value"], command=which)
    return Candidate(arg_patch((edit,), rationale=why, origin=ORIGIN, evidence=evidence), ORIGIN, why, evidence)


def keyword_remedy(ctx: RepairContext, frame: FrameRef, choice: Choice, answer: dict[str, Any],
                   way: dict[str, str], site: KeywordSite) -> Candidate:
    value: object = int(way["value"]) if way["value"].isdigit() else way["value"]
    at = f"{site.src.path}:{site.keyword.value.lineno}"
    inputs = ", ".join(f"{k}={v}" for k, v in answer["inputs"].items())
    why = (f"{frame.file}:{frame.line} passes self.{choice.chosen}, which {choice.function}() chose: "
           f"{answer['now']!r} for {inputs} on this host; the job sets {way['field']} in its code ({at}), and with "
           f"{value!r} the library's own code takes another way, {way['answer']!r}: give the call that value")
    evidence = (f"{frame.file}:{choice.call_line}: self.{choice.chosen} = {choice.function}(...)",
                f"{at}: {way['field']}={site.src.segment(site.keyword.value)}",
                f"{frame.file}:{choice.line}: {way['field']}={value!r} -> {way['answer']!r}")
    return candidate(ctx, {site.src.path: site.with_value(value)}, origin=ORIGIN_KEYWORD, rationale=why,
                     evidence=evidence)


def ask(ctx: RepairContext, module: str, choice: Choice, fault: Fault, given: dict[str, str]) -> dict[str, Any]:
    """The target env's answer (option_probe.py), with the job's environment."""
    said = dict(NAMED.findall(fault.message))
    known = {i.param: said[i.attr] for i in choice.inputs if i.attr in said}  # the model's, not the job's to set
    logged = {name: value.removeprefix("torch.") for name, value in NAMED.findall(fault.log_excerpt)}
    spec = {"module": module, "function": choice.function, "known": known, "logged": logged,
            "inputs": [{"param": i.param, "field": i.field, "source": i.source} for i in choice.inputs
                       if i.param not in known],
            "command": list(ctx.server_command or ctx.job_command), "given": given}
    key = "option-branch:" + json.dumps(spec, sort_keys=True)
    if key not in ctx.memo:  # a SourceError is noted by the engine: the report says why no option remedy
        ctx.memo[key] = run_probe(ctx, PROBE, spec, f"which option changes {choice.function}()'s answer")
    return ctx.memo[key]
