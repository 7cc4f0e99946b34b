"""The NATS subject and stream layout of one Usher installation.

What it does: names every subject (cluster events, decisions, ledger request/reply, DLQ) under
one prefix, so tests and parallel installations never see each other's traffic, and escapes
Kubernetes names into subject tokens.
It is also the one place that ties a decision's subject to its action and type: the builder
(``decision_for``), the parser (``parse_decision``) and ``ledger_decision_problem``, which says
why a message that claims to be a ledger decision must not be believed (wrong subject, a
subject about another workload or zone, or not from the ledger).
What it must never do: talk to a server; it only computes and compares names.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas import (
    DECISION_ACTIONS,
    DEQUEUER_SOURCE,
    LEDGER_DECISION_TYPES,
    LEDGER_SOURCE,
    Admitted,
    Decision,
    Envelope,
    NodeHeld,
    NodeName,
    NodeResumed,
    PassRan,
    QuotaPath,
    Retried,
    Zone,
)

# Characters that NATS treats specially inside a subject token, and their escapes. `%` is
# escaped first so that escaping is reversible and names never collide.
_ESCAPES = (("%", "%25"), (".", "%2E"), ("*", "%2A"), (">", "%3E"), (" ", "%20"))


def token(value: str) -> str:
    """Make ``value`` safe as one subject token (Job names may contain dots)."""
    for raw, escaped in _ESCAPES:
        value = value.replace(raw, escaped)
    return value or "%00"


def untoken(value: str) -> str:
    """The name ``token`` escaped (its inverse)."""
    if value == "%00":
        return ""
    for raw, escaped in reversed(_ESCAPES):
        value = value.replace(escaped, raw)
    return value


@dataclass(frozen=True, slots=True)
class DecisionSubject:
    """The parts of ``<p>.decision.<zone>.<action>.<ns>.<name>``, unescaped."""

    zone: str
    action: str
    namespace: str
    name: str


@dataclass(frozen=True)
class Subjects:
    """All subjects and stream names under ``prefix`` (default ``usher``)."""

    prefix: str = "usher"

    @property
    def stream_name(self) -> str:
        """The log: every cluster event and decision, in one total order for replay."""
        return f"{self.prefix.upper().replace('-', '_')}_LOG"

    @property
    def dlq_stream_name(self) -> str:
        return f"{self.prefix.upper().replace('-', '_')}_DLQ"

    @property
    def log_subjects(self) -> list[str]:
        return [f"{self.prefix}.cluster.>", f"{self.prefix}.decision.>"]

    @property
    def dlq_subjects(self) -> list[str]:
        return [f"{self.prefix}.dlq.>"]

    def job(self, zone: Zone, namespace: str, name: str) -> str:
        return f"{self.prefix}.cluster.{token(zone)}.job.{token(namespace)}.{token(name)}"

    @property
    def quota(self) -> str:
        return f"{self.prefix}.cluster.quota"

    def node(self, zone: Zone, node: NodeName) -> str:
        return f"{self.prefix}.cluster.node.{token(zone)}.{token(node)}"

    def priority_class(self, name: str) -> str:
        return f"{self.prefix}.cluster.priorityclass.{token(name)}"

    def decision(self, zone: Zone, action: str, namespace: str, name: str) -> str:
        return (
            f"{self.prefix}.decision.{token(zone)}.{token(action)}.{token(namespace)}.{token(name)}"
        )

    def decision_for(self, decision: Decision, zone: Zone) -> str:
        """The subject ``decision`` is published on (its action comes from its type)."""
        namespace, _, name = decision.workload.partition("/")
        return self.decision(zone, DECISION_ACTIONS[type(decision)], namespace, name)

    def zone_served(self, zone: Zone) -> str:
        """Where a dequeuer announces that it serves ``zone`` (``ZoneServed``)."""
        return f"{self.prefix}.decision.{token(zone)}.zone.served"

    def pass_ran(self, zone: Zone) -> str:
        """Where the dequeuer of ``zone`` records a pass that proposed something (``PassRan``,
        D4); NATS lets only that dequeuer publish there."""
        return f"{self.prefix}.decision.{token(zone)}.pass.ran"

    @property
    def zones_served(self) -> str:
        """Filter matching every zone's ``ZoneServed`` subject."""
        return f"{self.prefix}.decision.*.zone.served"

    def served_zone(self, subject: str) -> Zone | None:
        """The zone of a ``zone_served`` subject; None for any other subject."""
        head, tail = f"{self.prefix}.decision.", ".zone.served"
        if not subject.startswith(head) or not subject.endswith(tail):
            return None
        middle = subject[len(head) : -len(tail)]
        return None if not middle or "." in middle else Zone(untoken(middle))

    def parse_decision(self, subject: str) -> DecisionSubject | None:
        """The parts of a decision subject of this installation; None for any other subject."""
        head = f"{self.prefix}.decision."
        if not subject.startswith(head):
            return None
        parts = subject[len(head) :].split(".")
        if len(parts) != 4:
            return None
        zone, action, namespace, name = (untoken(part) for part in parts)
        return DecisionSubject(zone, action, namespace, name)

    def ledger_decision_problem(self, subject: str, envelope: Envelope) -> str | None:
        """Why ``envelope`` on ``subject`` is not a decision of the ledger's; None when it is
        one (or is no ledger decision type at all). Only the ledger's outbox publishes
        ``Admitted``/``Preempted``/``Released``, each on the subject naming its own action,
        workload and (for an admission) zone, with the ledger as source; and an operator's
        hold, drain or resume (R14/R15) only on ``<p>.decision.hold.<its node>``."""
        decision = envelope.event
        if isinstance(decision, NodeHeld | NodeResumed):
            return self._hold_problem(subject, decision, envelope.source)
        if not isinstance(decision, LEDGER_DECISION_TYPES):
            return None
        tag = type(decision).__struct_config__.tag
        parsed = self.parse_decision(subject)
        if parsed is None:
            return f"a {tag} on {subject!r}, which is not a decision subject of {self.prefix!r}"
        action = DECISION_ACTIONS[type(decision)]
        if parsed.action != action:
            return f"a {tag} on a {parsed.action!r} subject ({subject}); it belongs on {action!r}"
        if f"{parsed.namespace}/{parsed.name}" != decision.workload:
            return (
                f"a {tag} about {decision.workload} on the subject of "
                f"{parsed.namespace}/{parsed.name} ({subject})"
            )
        if isinstance(decision, Admitted) and parsed.zone != decision.zone:
            return f"a {tag} to zone {decision.zone!r} on a subject of zone {parsed.zone!r}"
        if envelope.source != LEDGER_SOURCE:
            return f"a {tag} from {envelope.source!r}; only {LEDGER_SOURCE!r} makes it"
        return None

    def owner_problem(self, subject: str, envelope: Envelope) -> str | None:
        """Why ``envelope`` on ``subject`` is not a decision of its owner's; None when it is.

        The ledger's as ``ledger_decision_problem`` says; a ``Retried`` (R12) is the dequeuer
        of its zone's: on that zone's ``retried`` subject of its own workload, from that
        dequeuer (NATS lets only it publish there); so is a ``PassRan`` (D4), on that zone's
        ``pass.ran`` subject."""
        problem = self.ledger_decision_problem(subject, envelope)
        decision = envelope.event
        if problem is None and isinstance(decision, PassRan):
            return self._pass_problem(subject, decision, envelope.source)
        if problem is not None or not isinstance(decision, Retried):
            return problem
        tag = type(decision).__struct_config__.tag
        parsed = self.parse_decision(subject)
        if parsed is None or parsed.action != DECISION_ACTIONS[Retried]:
            return f"a {tag} on {subject!r}, which is not a retried subject of {self.prefix!r}"
        if f"{parsed.namespace}/{parsed.name}" != decision.workload:
            return f"a {tag} about {decision.workload} on the subject of another ({subject})"
        if parsed.zone != decision.zone:
            return f"a {tag} of zone {decision.zone!r} on a subject of zone {parsed.zone!r}"
        owner = f"{DEQUEUER_SOURCE}/{decision.zone}"
        if envelope.source != owner:
            return f"a {tag} from {envelope.source!r}; only {owner!r} makes it"
        return None

    def _pass_problem(self, subject: str, event: PassRan, source: str) -> str | None:
        """Why a ``PassRan`` is not its zone dequeuer's record (D4); None when it is."""
        tag = type(event).__struct_config__.tag
        home = self.pass_ran(event.zone)
        if subject != home:
            return f"a {tag} of zone {event.zone!r} on {subject!r}; it belongs on {home!r}"
        owner = f"{DEQUEUER_SOURCE}/{event.zone}"
        if source != owner:
            return f"a {tag} from {source!r}; only {owner!r} makes it"
        return None

    def _hold_problem(self, subject: str, event: NodeHeld | NodeResumed, source: str) -> str | None:
        tag = type(event).__struct_config__.tag
        home = self.hold(event.node)
        if subject != home:
            return f"a {tag} of {event.node} on {subject!r}; it belongs on {home!r}"
        if source != LEDGER_SOURCE:
            return f"a {tag} from {source!r}; only {LEDGER_SOURCE!r} records it"
        return None

    @property
    def all_decisions(self) -> str:
        return f"{self.prefix}.decision.>"

    @property
    def all_cluster(self) -> str:
        return f"{self.prefix}.cluster.>"

    @property
    def ledger_reserve(self) -> str:
        return f"{self.prefix}.ledger.reserve"

    @property
    def ledger_release(self) -> str:
        return f"{self.prefix}.ledger.release"

    @property
    def ledger_preempt(self) -> str:
        return f"{self.prefix}.ledger.preempt"

    @property
    def ledger_requeue(self) -> str:
        """Requeues for readiness a dequeuer asks the ledger to carry out (R10)."""
        return f"{self.prefix}.ledger.requeue"

    def ledger_hold(self, identity: str) -> str:
        """Where NATS identity ``identity`` asks the ledger to hold, drain or resume a node
        (R14/R15): each identity may publish only its own, so the ledger knows who asks."""
        return f"{self.prefix}.ledger.hold.{token(identity)}"

    @property
    def ledger_holds(self) -> str:
        """Every identity's hold requests (what the ledger subscribes to)."""
        return f"{self.prefix}.ledger.hold.*"

    def hold_identity(self, subject: str) -> str | None:
        """The identity a hold request's subject names, or None if it is not one."""
        head = f"{self.prefix}.ledger.hold."
        rest = subject[len(head) :] if subject.startswith(head) else ""
        return untoken(rest) if rest and "." not in rest else None

    def hold(self, node: QuotaPath) -> str:
        """Where the ledger records a hold, drain or resume of ``node`` (on the log)."""
        return f"{self.prefix}.decision.hold.{token(node)}"

    @property
    def holds(self) -> str:
        """Every hold, drain and resume the ledger records (only the ledger may publish)."""
        return f"{self.prefix}.decision.hold.*"

    @property
    def preempt_request(self) -> str:
        """Dequeuers propose a reclaim here; the preemptor checks it and asks the ledger."""
        return f"{self.prefix}.preempt.request"

    def dlq(self, service: str) -> str:
        return f"{self.prefix}.dlq.{token(service)}"
