"""Every ``usher.io/`` tree attribute and job annotation Usher reads, in one registry.

What it does: one ``Setting`` per key -- where it may be written (``scope``: a tree node's
``attributes``, a job's ``metadata.annotations``, or both), which parser reads it (``kind``,
``parse``), its default, whether a node inherits it, the rule that uses it, an example and its
bounds in words. ``SETTINGS`` lists them in the order of the reference page
(docs/reference/annotations.md is rendered from it); ``setting(key)`` finds one. The
``*_ATTRIBUTE`` / ``*_ANNOTATION`` constants of the rule modules are these keys.
``Setting.check`` refuses a value naming its field (``ValueRefused``); ``Setting.read`` gives an
already validated value to the engine and gives ``None`` -- never an exception -- for one that
is absent or malformed (a tree forged onto the log bypasses the watcher's validation).
Values written in a small language of their own (budgets, zone caps, tolerations) are checked
here for type, length and characters; their grammar is their rule module's (B1, Z1, Z3, Z4).
What it must never do: do I/O, hold a rule's logic, or let a value reach a rule unchecked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from typing import Any, Final, Generic, Literal, TypeVar

from schemas import FieldError
from usher.core.model.errors import ValueRefused
from usher.core.values import labels, names, numbers, quantities, text
from usher.core.values.numbers import MAX_COUNT, MAX_SECONDS
from usher.core.values.shown import shown

T = TypeVar("T")
Scope = Literal["tree", "job", "both"]

MAX_RETRY_LIMIT: Final = 100
"""Retries a job may get: a hundred is already far more than a failing job deserves."""
MAX_REQUEUE_ATTEMPTS: Final = 1000
"""Admissions a workload may time out in (R10)."""
MAX_MEMORY_FACTOR: Final = Fraction(100)
"""The most an OOM scale-up multiplies memory by at once (R13)."""
MAX_WEIGHT: Final = MAX_COUNT
"""The largest fair-share weight (F1)."""
MAX_RUNTIME_SECONDS: Final = 366 * 24 * 3600
"""The longest declared maximum runtime (RT1): a year."""
DEFAULT_STARVATION_SECONDS: Final = 600
"""The starvation threshold of a tree that sets none (N1): ten minutes. Far above the waits
of a queue that flows (the bench's mean waits are seconds to a minute and a half), so the
guard holds nothing then; short enough that a large head passed over by a stream of small
jobs is served within ten minutes plus the longest run. ``0`` on a node turns it off."""

WITHIN_QUOTA_VALUES: Final = ("Never", "LowerPriority")
WHILE_BORROWING_VALUES: Final = ("Never", "LowerPriority", "LowerPriorityBorrowersOnly")
"""``usher.io/preempt-while-borrowing``: but ``Never``, each may add ``:<threshold>``."""
WITHIN_QUOTA_REQUEST_VALUES: Final = ("Any", "WithinMin")
HOLD_VALUES: Final = ("hold", "drain")
BUDGET_ACTION_VALUES: Final = ("hold", "min-only", "lower-priority")
OVERRUN_VALUES: Final = ("hold", "off")
RECLAIM_WITHIN_VALUES: Final = ("Any", "LowerPriority", "Never")

ATTRIBUTES_PATH: Final = "attributes"
ANNOTATIONS_PATH: Final = "metadata.annotations"


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One ``usher.io/`` key: where it is written, how it is read, what it means."""

    key: str
    scope: Scope
    kind: str
    """The parser's name (``seconds``, ``count``, ``zone-names``, ...)."""
    summary: str
    default: str | None
    inherited: bool
    """Whether a tree node's value applies to the nodes below it that set none."""
    rule: str
    """The rule's code and name, e.g. ``R12 Retries of failed jobs``."""
    example: str
    bounds: str
    """The values accepted, in words."""
    parse: Callable[[object, str], T] = field(repr=False, compare=False)
    """``parse(raw, path)``: the value, or ``ValueRefused`` naming ``path``."""

    def check(self, raw: object, prefix: str) -> T:
        """The value of ``raw`` written at ``<prefix>.<key>``; ``ValueRefused`` naming it."""
        return self.parse(raw, f"{prefix}.{self.key}")

    def refusal(self, values: Mapping[str, object], prefix: str) -> FieldError | None:
        """Why the value ``values`` holds for this key is refused; None when absent or good."""
        if self.key not in values:
            return None
        try:
            self.check(values[self.key], prefix)
        except ValueRefused as refused:
            return refused.errors[0]
        return None

    def read(self, values: Mapping[str, object]) -> T | None:
        """The value ``values`` holds for this key; None when absent or malformed. Never
        raises: the engine reads trees through it that no validation may have seen."""
        raw = values.get(self.key)
        if raw is None:
            return None
        try:
            return self.parse(raw, self.key)
        except ValueRefused:
            return None


def _seconds(key: str, *, low: int = 0, high: int = MAX_SECONDS) -> Callable[[object, str], int]:
    return partial(numbers.seconds, low=low, high=high, name=key)


def _count(key: str, *, low: int, high: int) -> Callable[[object, str], int]:
    return partial(numbers.count, low=low, high=high, name=key)


def _choice(key: str, allowed: tuple[str, ...]) -> Callable[[object, str], str]:
    return partial(text.choice, allowed=allowed, name=key)


def _boolean(key: str) -> Callable[[object, str], bool]:
    return partial(text.boolean, name=key)


def _rule_text(key: str) -> Callable[[object, str], str]:
    return partial(text.bounded_text, name=key)


def _zones(key: str) -> Callable[[object, str], list[Any]]:
    return partial(names.zone_names, name=key)


def _while_borrowing(raw: object, path: str) -> tuple[str, int | None]:
    """``Never``, ``LowerPriority`` or ``LowerPriorityBorrowersOnly``, the last two optionally
    with ``:<threshold>`` (a priority, T4), as ``(policy, threshold)``; ``ValueRefused`` naming
    ``path``."""
    name = "usher.io/preempt-while-borrowing"
    if isinstance(raw, str) and raw in WHILE_BORROWING_VALUES:
        return raw, None
    policy, colon, written = raw.partition(":") if isinstance(raw, str) else ("", "", "")
    if colon and policy in WHILE_BORROWING_VALUES[1:]:
        return policy, numbers.priority(written, path, name=f"the threshold of {name}")
    code = "invalid-value" if isinstance(raw, str) else "invalid-type"
    wanted = "Never, LowerPriority or LowerPriorityBorrowersOnly, optionally :N (N a priority)"
    message = f"{name} must be {wanted}, got {shown(raw)}"
    raise ValueRefused(path, code, message)


_SECONDS_BOUNDS: Final = f"a whole number of seconds, 0 to {MAX_SECONDS} (30 days)"
_RULE_TEXT_BOUNDS: Final = f"at most {text.MAX_RULE_TEXT} printable characters"

WITHIN_QUOTA: Final = Setting(
    key="usher.io/within-quota",
    scope="tree",
    kind="enum",
    summary="Whether a workload within its quota may preempt lower-priority work of its own leaf.",
    default=None,
    inherited=True,
    rule="R5 Reclaim conditions",
    example="LowerPriority",
    bounds="Never or LowerPriority (default: the engine's configuration)",
    parse=_choice("usher.io/within-quota", WITHIN_QUOTA_VALUES),
)
RECLAIM_WITHIN: Final = Setting(
    key="usher.io/reclaim-within",
    scope="tree",
    kind="enum",
    summary="Which borrowers of other leaves a workload within its guarantee may reclaim from: "
    "any, only lower-priority ones, or none (then the node's idle guarantee is not lent).",
    default="Any",
    inherited=True,
    rule="L1 Reclaim within the cohort",
    example="LowerPriority",
    bounds="Any, LowerPriority or Never",
    parse=_choice("usher.io/reclaim-within", RECLAIM_WITHIN_VALUES),
)
LENDING_LIMIT: Final = Setting(
    key="usher.io/lending-limit",
    scope="tree",
    kind="resource-amounts",
    summary="Per resource, the most of the node's idle guarantee that work outside its subtree "
    "may borrow; the rest stays for its own subtree.",
    default=None,
    inherited=True,
    rule="L2 Lending limit",
    example="cpu=4, nvidia.com/gpu=2",
    bounds=f"'resource=quantity' separated by ',', at most {quantities.MAX_RESOURCES} resources, "
    "each 0 to 2^62 canonical units",
    parse=partial(quantities.resource_amounts, name="usher.io/lending-limit"),
)
MIN_RUNTIME: Final = Setting(
    key="usher.io/min-runtime-seconds",
    scope="tree",
    kind="seconds",
    summary="Seconds an admitted workload runs before it may be preempted by a reclaim.",
    default=None,
    inherited=True,
    rule="R5 Reclaim conditions",
    example="300",
    bounds=_SECONDS_BOUNDS,
    parse=_seconds("usher.io/min-runtime-seconds"),
)
RECLAIM_WITH_OWN_VICTIMS: Final = Setting(
    key="usher.io/reclaim-with-own-victims",
    scope="tree",
    kind="boolean",
    summary="A leaf's guarantee is judged with the lower-priority work it preempts in its own "
    "leaf set aside, so one search takes its own victims and other leaves' borrowers together.",
    default="false",
    inherited=True,
    rule="P1 One victim search across a leaf and its cohort",
    example="true",
    bounds="true or false",
    parse=_boolean("usher.io/reclaim-with-own-victims"),
)
PREEMPT_WHILE_BORROWING: Final = Setting(
    key="usher.io/preempt-while-borrowing",
    scope="tree",
    kind="borrowing-policy",
    summary="Whether a workload asking beyond its leaf's guarantee may preempt other leaves' "
    "borrowers of lower priority (at most the threshold, when given); BorrowersOnly: only "
    "what they borrow beyond their own guarantee.",
    default="Never",
    inherited=True,
    rule="P2 Preempting while borrowing",
    example="LowerPriority:100",
    bounds=f"Never, LowerPriority or LowerPriorityBorrowersOnly, the last two optionally "
    f"followed by :N, N a priority (a whole number from {numbers.MIN_PRIORITY} to "
    f"{numbers.MAX_PRIORITY})",
    parse=_while_borrowing,
)
WITHIN_QUOTA_REQUEST: Final = Setting(
    key="usher.io/within-quota-request",
    scope="tree",
    kind="enum",
    summary="Which requests may preempt lower-priority work of their own leaf: Any, or only "
    "one within the leaf's min (unless preempting while borrowing is allowed).",
    default="Any",
    inherited=True,
    rule="P3 Only a request within the guarantee preempts in its leaf",
    example="WithinMin",
    bounds="Any or WithinMin",
    parse=_choice("usher.io/within-quota-request", WITHIN_QUOTA_REQUEST_VALUES),
)
READY_TIMEOUT: Final = Setting(
    key="usher.io/ready-timeout-seconds",
    scope="tree",
    kind="seconds",
    summary="Seconds an admitted workload may take to have all its pods ready; 0 is off.",
    default="0",
    inherited=True,
    rule="R10 Readiness and requeue",
    example="600",
    bounds=_SECONDS_BOUNDS,
    parse=_seconds("usher.io/ready-timeout-seconds"),
)
REQUEUE_BACKOFF: Final = Setting(
    key="usher.io/requeue-backoff-seconds",
    scope="tree",
    kind="seconds",
    summary="Wait after a workload's first readiness requeue, doubled after each further one.",
    default=None,
    inherited=True,
    rule="R10 Readiness and requeue",
    example="60",
    bounds=_SECONDS_BOUNDS,
    parse=_seconds("usher.io/requeue-backoff-seconds"),
)
REQUEUE_BACKOFF_MAX: Final = Setting(
    key="usher.io/requeue-backoff-max-seconds",
    scope="tree",
    kind="seconds",
    summary="The cap of the readiness requeue wait.",
    default=None,
    inherited=True,
    rule="R10 Readiness and requeue",
    example="3600",
    bounds=_SECONDS_BOUNDS,
    parse=_seconds("usher.io/requeue-backoff-max-seconds"),
)
REQUEUE_MAX_ATTEMPTS: Final = Setting(
    key="usher.io/requeue-max-attempts",
    scope="tree",
    kind="count",
    summary="Admissions a workload may time out in before it ends Inadmissible.",
    default=None,
    inherited=True,
    rule="R10 Readiness and requeue",
    example="5",
    bounds=f"a whole number, 1 to {MAX_REQUEUE_ATTEMPTS}",
    parse=_count("usher.io/requeue-max-attempts", low=1, high=MAX_REQUEUE_ATTEMPTS),
)
REQUEUED_MAY_PREEMPT: Final = Setting(
    key="usher.io/requeued-may-preempt",
    scope="tree",
    kind="boolean",
    summary="A workload requeued for not becoming ready may preempt on its later attempts; "
    "by default it takes only free room.",
    default="false",
    inherited=True,
    rule="R10 Readiness and requeue",
    example="true",
    bounds="true or false",
    parse=_boolean("usher.io/requeued-may-preempt"),
)
RETRY_LIMIT: Final = Setting(
    key="usher.io/retry-limit",
    scope="both",
    kind="count",
    summary="Attempts a failed job may have after its first; a job's own annotation opts it "
    "in, bounded by the tree's limit when the tree sets one.",
    default="0",
    inherited=True,
    rule="R12 Retries of failed jobs",
    example="3",
    bounds=f"a whole number, 0 to {MAX_RETRY_LIMIT}",
    parse=_count("usher.io/retry-limit", low=0, high=MAX_RETRY_LIMIT),
)
OOM_MEMORY_FACTOR: Final = Setting(
    key="usher.io/oom-memory-factor",
    scope="both",
    kind="factor",
    summary="What an OOMKilled container's memory is multiplied by for the next attempt; a "
    "job's annotation wins over the tree's.",
    default="1.5",
    inherited=True,
    rule="R13 OOM scale-up",
    example="2",
    bounds=f"a decimal number, 1 to {MAX_MEMORY_FACTOR}, at most 3 decimals",
    parse=partial(numbers.factor, high=MAX_MEMORY_FACTOR, name="usher.io/oom-memory-factor"),
)
OOM_MEMORY_CAP: Final = Setting(
    key="usher.io/oom-memory-cap",
    scope="job",
    kind="quantity",
    summary="The most memory an OOM scale-up gives any container of the job; not below any "
    "container's memory request.",
    default=None,
    inherited=False,
    rule="R13 OOM scale-up",
    example="64Gi",
    bounds="a memory quantity, more than 0 and at most 2^62 bytes",
    parse=partial(
        quantities.quantity, resource="memory", allow_zero=False, name="usher.io/oom-memory-cap"
    ),
)
MIN_PARALLELISM: Final = Setting(
    key="usher.io/min-parallelism",
    scope="job",
    kind="count",
    summary="The fewest pods the job may start with when all of them do not fit.",
    default=None,
    inherited=False,
    rule="R11 Partial admission",
    example="2",
    bounds=f"a whole number, 1 to {MAX_COUNT}",
    parse=_count("usher.io/min-parallelism", low=1, high=MAX_COUNT),
)
MIN_SUCCESS: Final = Setting(
    key="usher.io/min-success",
    scope="job",
    kind="count",
    summary="The job succeeds once this many of its pods succeeded.",
    default=None,
    inherited=False,
    rule="R11 Partial admission",
    example="4",
    bounds=f"a whole number, 1 to {MAX_COUNT}, and at most the pods of the job",
    parse=_count("usher.io/min-success", low=1, high=MAX_COUNT),
)
MAX_RUNTIME: Final = Setting(
    key="usher.io/max-runtime-seconds",
    scope="job",
    kind="seconds",
    summary="The longest the job runs, declared for planning (backfill, budget overrun hold, "
    "estimates); the smaller of it and the kind's own deadline counts.",
    default=None,
    inherited=False,
    rule="RT1 A declared maximum runtime",
    example="3600",
    bounds=f"a whole number of seconds, 1 to {MAX_RUNTIME_SECONDS} (366 days)",
    parse=_seconds("usher.io/max-runtime-seconds", low=1, high=MAX_RUNTIME_SECONDS),
)
ADMISSION_GATED_BY: Final = Setting(
    key="usher.io/admission-gated-by",
    scope="job",
    kind="gate-names",
    summary="Admission gates: the job is not admitted while any is listed; remove each from the "
    "list to open it (a gate may be removed after creation, never added).",
    default=None,
    inherited=False,
    rule="G1 Admission gates",
    example="quota-review,example.com/security",
    bounds=f"distinct gate names (a DNS-1123 label, optionally after a DNS subdomain and '/') "
    f"separated by ',', at most {names.MAX_GATES}; empty: none",
    parse=partial(names.gate_names, name="usher.io/admission-gated-by"),
)
ZONES: Final = Setting(
    key="usher.io/zones",
    scope="both",
    kind="zone-names",
    summary="Accepted zones, most preferred first: a job's own list, or a tree node's default "
    "for the workloads below it that list none.",
    default=None,
    inherited=True,
    rule="Z2 Ordered fallback",
    example="a100,h100",
    bounds=f"distinct zone names (DNS-1123 labels, at most {names.MAX_LABEL} characters) "
    f"separated by ',', at most {names.MAX_ZONES}",
    parse=_zones("usher.io/zones"),
)
TOPOLOGY_LEVELS: Final = Setting(
    key="usher.io/topology-levels",
    scope="tree",
    kind="topology-levels",
    summary="The node labels that name topology domains, widest first (block, rack, host): "
    "a job may ask for all its pods in one domain of a level.",
    default=None,
    inherited=True,
    rule="TP1 Topology fit",
    example="topology.usher.io/block, topology.usher.io/rack, kubernetes.io/hostname",
    bounds=f"distinct label keys separated by ',', at most {labels.MAX_LEVELS}, each "
    f"{labels.HOSTNAME} or naming '{labels.TOPOLOGY_WORD}'",
    parse=partial(labels.topology_levels, name="usher.io/topology-levels"),
)
TOPOLOGY_REQUIRED: Final = Setting(
    key="usher.io/topology-required",
    scope="job",
    kind="topology-level",
    summary="Admit the job only when all its pods fit in one domain of this level.",
    default=None,
    inherited=False,
    rule="TP1 Topology fit",
    example="topology.usher.io/rack",
    bounds=f"one of the tree's topology levels: a label key, {labels.HOSTNAME} or naming "
    f"'{labels.TOPOLOGY_WORD}' (not with usher.io/topology-preferred)",
    parse=partial(labels.topology_level, name="usher.io/topology-required"),
)
TOPOLOGY_PREFERRED: Final = Setting(
    key="usher.io/topology-preferred",
    scope="job",
    kind="topology-level",
    summary="Place all the job's pods in one domain of the narrowest level, from this one up, "
    "that fits; anywhere in the zone when none does.",
    default=None,
    inherited=False,
    rule="TP1 Topology fit",
    example="topology.usher.io/rack",
    bounds=f"one of the tree's topology levels: a label key, {labels.HOSTNAME} or naming "
    f"'{labels.TOPOLOGY_WORD}' (not with usher.io/topology-required)",
    parse=partial(labels.topology_level, name="usher.io/topology-preferred"),
)
BURST_ZONES: Final = Setting(
    key="usher.io/burst-zones",
    scope="tree",
    kind="zone-names",
    summary="On the root only: zones used only when the others are full.",
    default=None,
    inherited=False,
    rule="Z3 Burst zones",
    example="eci",
    bounds=f"distinct zone names separated by ',', at most {names.MAX_ZONES}",
    parse=_zones("usher.io/burst-zones"),
)
BURST_TOLERATIONS: Final = Setting(
    key="usher.io/burst-tolerations",
    scope="tree",
    kind="rule-text",
    summary="On the root only: per burst zone, the taints its pods must tolerate.",
    default=None,
    inherited=False,
    rule="Z3 Burst zones",
    example="eci: virtual-kubelet.io/provider:NoSchedule",
    bounds=f"'zone: key[=value]:Effect, ...' separated by ';', {_RULE_TEXT_BOUNDS}",
    parse=_rule_text("usher.io/burst-tolerations"),
)
ZONE_MAX: Final = Setting(
    key="usher.io/zone-max",
    scope="tree",
    kind="rule-text",
    summary="What the node's subtree may use in one zone, per resource.",
    default=None,
    inherited=False,
    rule="Z1 Quota per zone",
    example="a100: nvidia.com/gpu=8; h100: nvidia.com/gpu=4",
    bounds=f"'zone: resource=quantity, ...' separated by ';', {_RULE_TEXT_BOUNDS}",
    parse=_rule_text("usher.io/zone-max"),
)
ZONE_MIN: Final = Setting(
    key="usher.io/zone-min",
    scope="tree",
    kind="rule-text",
    summary="The part of the node's min guaranteed in one zone, per resource.",
    default=None,
    inherited=False,
    rule="Z4 Guarantees per zone",
    example="a100: nvidia.com/gpu=4",
    bounds=f"as usher.io/zone-max, each amount within the node's min; {_RULE_TEXT_BOUNDS}",
    parse=_rule_text("usher.io/zone-min"),
)
HOLD: Final = Setting(
    key="usher.io/hold",
    scope="tree",
    kind="enum",
    summary="The node and everything below it admit nothing new; a drain also preempts the "
    "running work below it once its grace has passed.",
    default=None,
    inherited=True,
    rule="R14 Hold",
    example="hold",
    bounds="hold or drain",
    parse=_choice("usher.io/hold", HOLD_VALUES),
)
DRAIN_GRACE: Final = Setting(
    key="usher.io/drain-grace-seconds",
    scope="tree",
    kind="seconds",
    summary="A drain's grace before it preempts; also the default of usher drain.",
    default="0",
    inherited=True,
    rule="R15 Drain",
    example="600",
    bounds=_SECONDS_BOUNDS,
    parse=_seconds("usher.io/drain-grace-seconds"),
)
HOLD_REASON: Final = Setting(
    key="usher.io/hold-reason",
    scope="tree",
    kind="text",
    summary="Why the tree holds the node, shown in the pending reasons.",
    default=None,
    inherited=False,
    rule="R14 Hold",
    example="maintenance until Monday",
    bounds=f"at most {text.MAX_FREE_TEXT} printable characters",
    parse=partial(text.free_text, name="usher.io/hold-reason"),
)
STARVATION: Final = Setting(
    key="usher.io/starvation-seconds",
    scope="tree",
    kind="seconds",
    summary="Seconds a head of a queue may be passed over before capacity is reserved for it; "
    "0 is off.",
    default=str(DEFAULT_STARVATION_SECONDS),
    inherited=True,
    rule="N1 A head passed over gets a reservation",
    example="1800",
    bounds=_SECONDS_BOUNDS,
    parse=_seconds("usher.io/starvation-seconds"),
)
BACKFILL: Final = Setting(
    key="usher.io/backfill",
    scope="tree",
    kind="boolean",
    summary="A workload that declares a maximum runtime may be admitted beside a reservation "
    "it ends before.",
    default="false",
    inherited=True,
    rule="N2 Backfill under a reservation",
    example="true",
    bounds="true or false",
    parse=_boolean("usher.io/backfill"),
)
ALLOW_ZERO_REQUESTS: Final = Setting(
    key="usher.io/allow-zero-requests",
    scope="tree",
    kind="boolean",
    summary="Jobs of the node's leaves may have containers that request nothing.",
    default="false",
    inherited=True,
    rule="T3 A workload's request",
    example="true",
    bounds="true or false",
    parse=_boolean("usher.io/allow-zero-requests"),
)
FAIR_WEIGHT: Final = Setting(
    key="usher.io/fair-weight",
    scope="tree",
    kind="count",
    summary="The node's fair-share weight: its usage is divided by it.",
    default="1",
    inherited=True,
    rule="F1 Fair share with memory",
    example="2",
    bounds=f"a whole number, 1 to {MAX_WEIGHT}",
    parse=_count("usher.io/fair-weight", low=1, high=MAX_WEIGHT),
)
BUDGETS: Final = Setting(
    key="usher.io/budgets",
    scope="tree",
    kind="rule-text",
    summary="Budgets of resource x time per window for the node's subtree.",
    default=None,
    inherited=False,
    rule="B1 Window budgets",
    example="nvidia.com/gpu=500h per month; cpu=20000h per 7d",
    bounds=f"'resource=<hours>h per month|<N>d' separated by ';', N 1 to 366; {_RULE_TEXT_BOUNDS}",
    parse=_rule_text("usher.io/budgets"),
)
BUDGET_ACTION: Final = Setting(
    key="usher.io/budget-action",
    scope="tree",
    kind="enum",
    summary="What the node's budgets do when spent.",
    default="hold",
    inherited=False,
    rule="B1 Window budgets",
    example="min-only",
    bounds="hold, min-only or lower-priority",
    parse=_choice("usher.io/budget-action", BUDGET_ACTION_VALUES),
)
BUDGET_OVERRUN: Final = Setting(
    key="usher.io/budget-overrun",
    scope="tree",
    kind="enum",
    summary="Hold a workload whose declared runtime would overrun a budget of the node.",
    default="off",
    inherited=False,
    rule="B2 The budget overrun hold",
    example="hold",
    bounds="hold or off (hold only on a node with usher.io/budgets)",
    parse=_choice("usher.io/budget-overrun", OVERRUN_VALUES),
)
SIM_DURATION: Final = Setting(
    key="usher.io/sim-duration",
    scope="job",
    kind="duration",
    summary="Local stack only: how long the emulator's kubelet runs the job's pods.",
    default=None,
    inherited=False,
    rule="none (the local stack's emulator reads it)",
    example="90",
    bounds=f"seconds, 0 to {MAX_SECONDS} (30 days), at most 3 decimals",
    parse=partial(numbers.duration, name="usher.io/sim-duration"),
)

SETTINGS: Final[tuple[Setting[Any], ...]] = (
    WITHIN_QUOTA,
    RECLAIM_WITHIN,
    LENDING_LIMIT,
    MIN_RUNTIME,
    RECLAIM_WITH_OWN_VICTIMS,
    PREEMPT_WHILE_BORROWING,
    WITHIN_QUOTA_REQUEST,
    READY_TIMEOUT,
    REQUEUE_BACKOFF,
    REQUEUE_BACKOFF_MAX,
    REQUEUE_MAX_ATTEMPTS,
    REQUEUED_MAY_PREEMPT,
    RETRY_LIMIT,
    OOM_MEMORY_FACTOR,
    OOM_MEMORY_CAP,
    MIN_PARALLELISM,
    MIN_SUCCESS,
    MAX_RUNTIME,
    ADMISSION_GATED_BY,
    ZONES,
    BURST_ZONES,
    BURST_TOLERATIONS,
    TOPOLOGY_LEVELS,
    TOPOLOGY_REQUIRED,
    TOPOLOGY_PREFERRED,
    ZONE_MAX,
    ZONE_MIN,
    HOLD,
    DRAIN_GRACE,
    HOLD_REASON,
    STARVATION,
    BACKFILL,
    ALLOW_ZERO_REQUESTS,
    FAIR_WEIGHT,
    BUDGETS,
    BUDGET_ACTION,
    BUDGET_OVERRUN,
    SIM_DURATION,
)
"""Every key Usher reads, in the reference page's order."""

_BY_KEY: Final[dict[str, Setting[Any]]] = {entry.key: entry for entry in SETTINGS}


def setting(key: str) -> Setting[Any]:
    """The setting of ``key``; ``KeyError`` for a key Usher does not read."""
    return _BY_KEY[key]


def tree_settings() -> tuple[Setting[Any], ...]:
    """The settings a tree node's attributes may hold."""
    return tuple(entry for entry in SETTINGS if entry.scope != "job")


def job_settings() -> tuple[Setting[Any], ...]:
    """The settings a job's annotations may hold."""
    return tuple(entry for entry in SETTINGS if entry.scope != "tree")


def attribute_errors(attributes: Mapping[str, object], prefix: str) -> list[FieldError]:
    """Every tree-scope value of ``attributes`` that its parser refuses, at
    ``<prefix>.<key>``, in registry order."""
    found = (entry.refusal(attributes, prefix) for entry in tree_settings())
    return [error for error in found if error is not None]
