"""The drift registry: each before-launch detector beside the repairs its findings feed.

A detector reads the caller's code against the installed library and returns faults that carry a structured
``Finding`` (callee, keyword, member…); the repairs paired with the finding's kind derive the patch from the
same library, reading the finding, not a sentence. ``REPAIRS`` is every derived repair in the engine's order:
the ones no detector feeds (a moved import; a driver's missing ``__main__`` guard; the library against its host,
its stand-ins included) answer faults that only a run shows. ``ENVIRONMENT_FIRST`` is asked before them and
answers alone; ``LAST_RESORT`` only when nothing else found a candidate (the packages' own release history:
slow, it downloads and imports; a failure the library absorbed and warned of before the fatal one; a swap of
the library's that misses what a module captured at import, which imports the modules it names; a stand-in the
library's later release puts in place of a name whose original fails on this host; a key the library's later
release makes another way for a lookup of its own that missed it), and its proof
that nothing can be done is the stop's message.

    detector (agent/repair/scan_*.py)        finds                                 repaired by
    interface_drift                          interface_limit (the model's class)   none: a proven stop, first
    environment_drift                        environment, env_choice (CUDA: start)  environment
    signature_drift                          unexpected_kwarg, missing_argument    unexpected_kwarg, missing_argument
    protocol_drift                           protocol_step                         protocol_step
    shape_drift                              return_shape                          changed_return_shape
    device_drift                             device_call                           playbooks (a known signature)
    zero_answer_drift                        zero_answer (a helper of ours: zero)  playbooks (a known signature)
    grafted_member_drift                     grafted_member                        renamed_member
    platform_drift (the server's code)       distribution_name, capability         distribution_name, capability
    playbook_drift                           playbook (a playbook's predict)       that playbook
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.repair import (
    derived_absorbed,
    derived_awaited_write,
    derived_branch_switch,
    derived_calls,
    derived_dataflow,
    derived_driver,
    derived_env,
    derived_history,
    derived_kernels,
    derived_lagging_callee,
    derived_members,
    derived_named_option,
    derived_next_release,
    derived_next_stand_in,
    derived_option_branch,
    derived_overrides,
    derived_packages,
    derived_platform,
    derived_precondition,
    derived_rebuilt_key,
    derived_refused_pin,
    derived_stand_in_names,
    derived_stand_ins,
    derived_swap_holders,
    derived_unreached_window,
)
from agent.repair.edits import Source
from agent.repair.scan_env import environment_drift
from agent.repair.scan_interfaces import interface_drift
from agent.repair.scan_members import grafted_member_drift
from agent.repair.scan_platform import platform_drift
from agent.repair.scan_playbooks import playbook_drift
from agent.repair.scan_rules import device_drift, protocol_drift, shape_drift
from agent.repair.scan_signatures import signature_drift
from agent.repair.scan_zero_answers import zero_answer_drift
from agent.repair.types import Candidate, Fault, FindingKind, RepairContext

Detector = Callable[[RepairContext, list[Source]], list[Fault]]
Repair = Callable[[RepairContext, Fault], list[Candidate]]

# Order matters only among repairs that match the same fault; most match one kind of message each.
REPAIRS: tuple[tuple[str, Repair], ...] = (
    ("unexpected_kwarg", derived_calls.unexpected_keyword),
    ("missing_argument", derived_calls.missing_argument),
    ("renamed_member", derived_members.renamed_member),
    ("moved_import", derived_members.moved_import),
    ("changed_return_shape", derived_dataflow.changed_return_shape),
    ("protocol_step", derived_dataflow.mandatory_protocol_step),
    # the library's refusal names the step its own driver takes first (a state it reads, set by that step)
    ("named_precondition", derived_precondition.named_precondition),
    # the library refuses a value we pin, and chooses one itself when it is left unset
    ("refused_pin", derived_refused_pin.refused_pin),
    ("main_guard", derived_driver.main_guard),  # the user's driver, from the interpreter's own words
    # the caller used a file the library answered with before the library's writer let go of it
    ("awaited_write", derived_awaited_write.awaited_write),
    ("environment", derived_env.environment_remedy),
    # a host-dependent choice of the library, taken another way by an option of the job's command
    ("option_branch", derived_option_branch.option_branch_remedy),
    # the library's refusal names a switch of its own CLI that its guard reads
    ("named_switch", derived_named_option.named_switch),
    # the failing call stands under a config value the library set itself from a setting its CLI turns off
    ("branch_switch", derived_branch_switch.branch_switch),
    # wrong values from a model whose sliding window the job never reaches: the library's switch that turns it off
    ("unreached_window", derived_unreached_window.unreached_window),
    # the library against its host: these edit the library's own files (agent/repair/derived_platform.py)
    ("distribution_name", derived_platform.distribution_name),
    ("capability", derived_platform.capability_predicate),
    ("skipped_base_step", derived_overrides.skipped_base_step),
    ("lagging_stand_in", derived_kernels.lagging_stand_in),
    ("stand_in_named_apart", derived_stand_in_names.stand_in_named_apart),
    ("stand_in_member", derived_stand_ins.stand_in_member),
    ("noop_member", derived_stand_ins.noop_member),
    ("noop_answer", derived_stand_ins.answered_member),
)
# Faults of the environment's packages: when one of these answers, it is the only answer (a distribution outside
# the range the package declares, or one it declares that is not installed at all, is cured by installing what it
# declares, never by a code patch), asked before the rest.
ENVIRONMENT_FIRST: tuple[tuple[str, Repair], ...] = (
    ("requirement_range", derived_packages.requirement_outside_range),
    ("requirement_missing", derived_packages.requirement_missing),
)
# Asked only when no other source found a candidate (each try downloads releases and imports in the target env):
# the fixable package does not import as shipped though no range it declares is violated.
LAST_RESORT: tuple[tuple[str, Repair], ...] = (
    ("import_history", derived_history.environment_history),
    ("next_release", derived_next_release.next_release_function),  # the package's later word on that function
    # the library warned of a failure it absorbed, the run died after: the library's later word on that function
    ("absorbed_failure", derived_absorbed.absorbed_failure),
    # the library calls a function of its own that does not take what it passes: the library's later definition
    ("lagging_callee", derived_lagging_callee.lagging_callee),
    # the library looks up a key it made itself in a table it built, and misses: its later release makes the key
    # another way
    ("rebuilt_key", derived_rebuilt_key.rebuilt_key),
    # the library swaps a module's name for this host's stand-in after the module handed the original to an object
    ("swap_misses_holder", derived_swap_holders.swap_misses_holder),
    # the original of a name fails on this host; the library's later release stands its own in for it for good
    ("next_stand_in", derived_next_stand_in.next_stand_in),
)
# The only repairs asked of a fatal fault (a CUDA error, a signal): each proves for itself that the call that raised
# cannot work on this host (no device, so no kernel's error could have surfaced there), or proposes nothing.
FATAL: tuple[tuple[str, Repair], ...] = (("next_stand_in", derived_next_stand_in.next_stand_in),)
PLAYBOOKS = "playbooks"  # a finding a known signature answers (agent/repair/playbooks.py)


@dataclass(frozen=True)
class Drift:
    detect: Detector
    finds: tuple[FindingKind, ...]
    repaired_by: tuple[str, ...]  # names in REPAIRS, or PLAYBOOKS


# A model no change can run first (the session stops there, nothing changed); then the environment: a library the
# host lacks is a host step, and a person should hear of it at once.
DRIFTS: tuple[Drift, ...] = (
    Drift(interface_drift, ("interface_limit",), ()),
    Drift(environment_drift, ("environment", "env_choice"), ("environment",)),
    Drift(signature_drift, ("unexpected_kwarg", "missing_argument"), ("unexpected_kwarg", "missing_argument")),
    Drift(protocol_drift, ("protocol_step",), ("protocol_step",)),
    Drift(shape_drift, ("return_shape",), ("changed_return_shape",)),
    Drift(device_drift, ("device_call",), (PLAYBOOKS,)),
    Drift(zero_answer_drift, ("zero_answer",), (PLAYBOOKS,)),
    Drift(grafted_member_drift, ("grafted_member",), ("renamed_member",)),
    Drift(platform_drift, ("distribution_name", "capability"), ("distribution_name", "capability")),
    Drift(playbook_drift, ("playbook",), (PLAYBOOKS,)),
)


def repairs_for(kind: FindingKind) -> tuple[str, ...]:
    """The repairs a finding of this kind goes to (the engine asks only these for a scan fault)."""
    return next(d.repaired_by for d in DRIFTS if kind in d.finds)
