"""The medic loop as a LangGraph StateGraph. Read top-down: the nodes, then the routers, then the wiring.

    preflight ─► scan ─(a finding)─► repair ─► [approve] ─► apply ─► verify ─(a scan fault, checks ok)─► scan
                  └─(none left)─► launch ─► watch ─(exit 0)─► validate ─(verified)─► report
                                              ├─(crashed)─► diagnose ─► repair
                                              └─(a check failed while loading)─► revert ─► repair
    diagnose ─(the same fault again)─► revert;  approve ─(rejected)─► repair;  apply ─(refused)─► repair
    repair ─(a person rejected a scan fault's repair: launch anyway, edit, or stop?)─► approve
    verify ─(checks ok)─► [confirm] ─► launch;  verify ─(a check failed)─► revert
    verify ─(a budget spent)─► budget_stop ─► report;  confirm ─(not confirmed)─► report
    validate ─(wrong output)─► repair;  validate ─(the canary or a shard passed)─► launch
    validate ─(wrong output with a model's patch newest)─► revert
    watch ─(Slurm: node failure, preemption)─► resubmit ─► launch;  resubmit ─(resubmits spent)─► report
    watch ─(the target started beside the canary ended first)─► launch
    repair ─(nothing left for a scan fault)─► scan;  repair ─(nothing left)─► report

How a launch runs — one detached process, shard runs, a Slurm job or array, a server and then its client — is
the session's launcher (agent/launchers/), picked from the config once: launch asks it to start, watch follows
its RunHandle, diagnose reads the log it names and asks it to explain the end (how Slurm ended a job, which side
of a two-process job failed), report asks it to end every run. No node branches on the way of running; a server
that dies while it loads is watched and diagnosed as the launch that crashed.

Every fault goes through the one repair → [approve/policy] → apply → verify → revert path, whoever found it
(scan, canary, crash, validator); ``[x]`` is a node a router may skip. A Slurm job's deterministic ends (time
limit, out of memory, cancelled by someone else, never starts) are faults for diagnose like a crash.
tests/test_graph_shape.py holds this drawing and the compiled graph's edges to each other.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, get_args, get_type_hints

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from agent.answers import confirm_answered
from agent.codec import proposal_of
from agent.deps import Deps, Settings
from agent.job import on_canary, target_launches
from agent.nodes.diagnose import diagnose
from agent.nodes.launch import launch
from agent.nodes.patching import apply, predicted, repair, revert, verify, verify_passed
from agent.nodes.preflight import preflight
from agent.nodes.report import report
from agent.nodes.resubmit import resubmit
from agent.nodes.scan import scan
from agent.nodes.validate import validate
from agent.nodes.watch import OVERTAKEN, watch
from agent.scheduler import transient
from agent.state import SessionState


# -- routers: each returns the name of the next node -----------------------------------------------------
def needs_host_change(state: SessionState) -> bool:
    proposal = state.get("proposal")
    return bool(proposal and proposal["patch"].get("host_steps"))


def after_scan(state: SessionState) -> Literal["repair", "launch"]:
    return "launch" if state.get("scan_done") else "repair"


def after_watch(state: SessionState) -> Literal["validate", "revert", "diagnose", "resubmit", "launch"]:
    run = state.get("run")
    outcome = str(run.get("outcome") or "") if run else ""
    if run is not None and transient(run):
        return "resubmit"  # the scheduler's fault, not the job's: the same job again, no patch
    if outcome.startswith("stopped:check failed"):
        return "revert"
    if outcome == OVERTAKEN:
        return "launch"  # the target started beside the canary ended first: its end is what counts
    if outcome == "exited":
        return "validate"
    return "diagnose"


def after_diagnose(state: SessionState) -> Literal["revert", "repair"]:
    faults = state.get("faults") or []
    # the same fault right after a patch: that patch did not cure it
    return "revert" if faults and faults[-1].get("repeated") and state.get("patches") else "repair"


def after_resubmit(state: SessionState) -> Literal["launch", "report"]:
    return "report" if state.get("outcome") else "launch"


def after_validate(state: SessionState) -> Literal["report", "repair", "launch", "revert"]:
    if state.get("outcome") is not None:
        return "report"
    if not state.get("fault"):
        return "launch"  # no fault: the canary passed, the target is next
    # a wrong output with a model's guess newest in place: that patch goes first (agent/faults.py)
    faults = state.get("faults") or []
    return "revert" if faults and faults[-1].get("repeated") and state.get("patches") else "repair"


def after_repair(state: SessionState, deps: Settings) -> Literal["approve", "apply", "scan", "report"]:
    if state.get("outcome"):
        return "report"
    if not state.get("proposal"):
        return "scan" if predicted(state.get("fault")) else "report"
    # a policy file makes even unattended sessions ask it (deny rules must bind there too); a change to the
    # host itself is never made unattended: a person (or a policy rule) says so first
    proposal = state.get("proposal")
    asked_again = bool(proposal and proposal.get("question"))  # after a person's no, only a person answers
    asks = deps.config.mode == "approve" or deps.config.policy_file or needs_host_change(state) or asked_again
    return "approve" if asks else "apply"


def after_approve(state: SessionState) -> Literal["apply", "repair"]:
    return "apply" if state.get("proposal") else "repair"


def after_apply(state: SessionState) -> Literal["verify", "repair"]:
    return "verify" if state.get("proposal") else "repair"  # refused: nothing written, try the next one


def after_verify(state: SessionState, deps: Settings) -> Literal["scan", "launch", "confirm", "revert", "budget_stop"]:
    if not verify_passed(state):
        return "revert"
    if predicted(state.get("fault")):
        return "scan"  # no launch yet: the next finding, or the first launch
    if target_launches(state) >= deps.config.budgets.max_launches and not on_canary(state, deps.config):
        return "budget_stop"
    if deps.clock() - (state.get("started") or deps.clock()) > deps.config.budgets.max_wall:
        return "budget_stop"
    return "confirm" if deps.config.confirm_launch else "launch"


def after_confirm(state: SessionState) -> Literal["launch", "report"]:
    return "report" if state.get("outcome") else "launch"


# -- nodes that need no module of their own ---------------------------------------------------------------
def approve(state: SessionState, deps: Deps) -> dict[str, Any]:
    """Approve mode: wait for a person. On resume the answer is the value given to Command(resume=…)."""
    from agent.answers import LAUNCH_INTO_FAULT, LAUNCH_QUESTION
    from agent.approval import answer_launch, answer_proposal
    from agent.policy import policy_answer

    proposal = proposal_of(state)
    if proposal.get("question") == LAUNCH_INTO_FAULT:  # no policy answers it: a person said no before
        deps.record("approval", "approve", {"patch_id": proposal["patch"].get("id"), "question": LAUNCH_QUESTION,
                                            "session": deps.config.session_id, "host_steps": []})
        return answer_launch(state, deps, interrupt({"kind": LAUNCH_INTO_FAULT, "proposal": proposal,
                                                     "question": LAUNCH_QUESTION, "host_steps": []}))
    auto = policy_answer(deps.config, proposal)  # before the interrupt: an auto-answer never waits
    if auto is not None:
        deps.record("policy", "approve", {"patch_id": proposal["patch"].get("id"), **auto})
        return answer_proposal(state, deps, auto)
    steps = list(proposal["patch"].get("host_steps") or [])
    deps.record("approval", "approve", {"patch_id": proposal["patch"].get("id"),
                                        "session": deps.config.session_id, "host_steps": steps})
    answer = interrupt({"kind": "host_change" if steps else "approve_patch", "proposal": proposal,
                        "host_steps": steps})
    return answer_proposal(state, deps, answer)


def confirm(state: SessionState, deps: Deps) -> dict[str, Any]:
    """--confirm-launch: a person says go before each relaunch (a launch can cost a 20-minute load)."""
    n = len(state.get("launches") or []) + 1
    patches = [p["patch"]["id"] for p in state.get("patches") or []]
    deps.record("confirm", "confirm", {"launch": n, "session": deps.config.session_id})
    answer = interrupt({"kind": "confirm_launch", "launch": n, "patches": patches})
    action = answer.get("action") if isinstance(answer, dict) else None
    said = {"launch": n, "action": action, "by": (answer or {}).get("by", ""),
            "reason": (answer or {}).get("reason") or "", "at": deps.clock()}
    deps.record("confirm_answer", "confirm", said)
    update = confirm_answered(state, said)
    if action == "approve":
        return update
    return {**update, "outcome": "rejected",
            "outcome_detail": f"launch {n} was not confirmed: {said['reason'] or 'no reason given'}"}


def budget_stop(state: SessionState, deps: Settings) -> dict[str, Any]:
    if state.get("outcome"):
        return {}
    launches = target_launches(state)
    return {"outcome": "budget", "outcome_detail": f"budget spent after {launches} target launch(es); "
            f"the last fault: {((state.get('fault') or {}).get('message') or 'none')[:200]}"}


def routes(router: Any) -> list[str]:
    """The nodes a router may return, read from its Literal (LangGraph cannot see through functools.partial)."""
    return list(get_args(get_type_hints(router)["return"]))


def build_graph(deps: Deps, checkpointer: Any = None) -> Any:
    """The compiled graph, its nodes bound to ``deps`` (host, config, engine, trace, view)."""
    graph = StateGraph(SessionState)
    for name, node in {
        "preflight": preflight, "scan": scan, "launch": launch, "watch": watch, "diagnose": diagnose, "repair": repair,
        "approve": approve, "apply": apply, "verify": verify, "revert": revert, "validate": validate,
        "confirm": confirm, "budget_stop": budget_stop, "report": report, "resubmit": resubmit,
    }.items():
        graph.add_node(name, partial(node, deps=deps))
    graph.add_edge(START, "preflight")
    graph.add_edge("preflight", "scan")
    graph.add_conditional_edges("scan", after_scan)
    graph.add_edge("launch", "watch")
    graph.add_conditional_edges("watch", after_watch)
    graph.add_conditional_edges("diagnose", after_diagnose)
    graph.add_edge("revert", "repair")
    graph.add_conditional_edges("validate", after_validate)
    graph.add_conditional_edges("resubmit", after_resubmit)
    graph.add_conditional_edges("repair", partial(after_repair, deps=deps), routes(after_repair))
    graph.add_conditional_edges("approve", after_approve)
    graph.add_conditional_edges("apply", after_apply)
    graph.add_conditional_edges("verify", partial(after_verify, deps=deps), routes(after_verify))
    graph.add_conditional_edges("confirm", after_confirm)
    graph.add_edge("budget_stop", "report")
    graph.add_edge("report", END)
    return graph.compile(checkpointer=checkpointer)
