"""The NATS subject and stream layout of one Usher installation, and who may say what where.

What it does: names every subject (cluster events, decisions, ledger request/reply, DLQ) under
one prefix, so tests and parallel installations never see each other's traffic, and turns
names into subject tokens that are always safe (``token``: escaped, and a name longer than
``MAX_TOKEN_NAME`` or with a character that is not printable becomes a fixed-length hash
token, so no user text can make a subject longer than NATS's 4 KB control line).
Decisions about workloads, and only they, are under ``<p>.decision.>`` (``decision``):
``<p>.decision.<zone>.<action>.<namespace>.<name>``. The ledger's holds, drains and resumes are
on ``<p>.hold.<node>``, a dequeuer's announcement that it serves its zone on
``<p>.zone.<zone>.served`` and its pass records on ``<p>.pass.<zone>.ran``: all on the log,
none under ``decision.>``. Usher 0.1.0 and earlier put them under ``decision.>``; every reader still
accepts them there (``legacy_home``) for ``MIGRATION_WINDOW``: a log written before keeps them.
It is also the one place that ties a log entry to who may have put it there
(``owner_problem``): a decision only on the subject its owner's builder gives it, naming its
own action, workload and (where the decision has one) zone, from its owner's source (the
ledger, or the dequeuer of that zone); a cluster event only on a cluster subject. Every
reader's fold (``usher.core.history.fold``) and the watcher use it.
What it must never do: talk to a server; it only computes and compares names. Pure: the
adapters (usher/adapters/nats/subjects.py) re-export it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from schemas import (
    CLUSTER_EVENT_TYPES,
    DECISION_ACTIONS,
    DECISION_TYPES,
    DEQUEUER_SOURCE,
    LEDGER_DECISION_TYPES,
    LEDGER_SOURCE,
    Admitted,
    ClusterConnected,
    ClusterDisconnected,
    ClusterLost,
    ClusterName,
    Decision,
    Envelope,
    NodeHeld,
    NodeName,
    NodeResumed,
    PassRan,
    Preempted,
    QuotaPath,
    Retried,
    Unmapped,
    Zone,
    ZoneServed,
)
from schemas.envelope import LogEvent

# Characters that NATS treats specially inside a subject token, and their escapes. `%` is
# escaped first so that escaping is reversible and names never collide.
_ESCAPES = (("%", "%25"), (".", "%2E"), ("*", "%2A"), (">", "%3E"), (" ", "%20"))

MAX_TOKEN_NAME: Final = 253
"""The longest name (in UTF-8 bytes) a token spells out (a Kubernetes object name, DNS-1123
subdomain): a longer one, or one with a character that is not printable (whitespace, control
characters: NATS would split the subject at them), becomes ``HASHED_TOKEN`` + a digest of it.
A subject then carries at most three such tokens of at most ``3 * MAX_TOKEN_NAME`` bytes
(every character escaped), far below the server's 4 KB control line, whatever a tenant
writes."""

MIGRATION_WINDOW: Final = "through Usher 0.2.x; 0.3.0 stops reading them"
"""How long readers accept holds, zone announcements and pass records on their 0.1 subjects
under ``<p>.decision.>`` (``legacy_home``): writers use the new subjects from 0.2.0 on, and a
log written by 0.1 is read as before by every 0.2 reader (fold, audit, watcher, console)."""

HASHED_TOKEN: Final = "%H"
"""How a hashed token starts: ``%`` is always escaped in a spelled-out name, so no name's
token starts like this and a hash never collides with a name."""


def token(value: str) -> str:
    """Make ``value`` safe as one subject token (Job names may contain dots; any name is
    bounded: see ``MAX_TOKEN_NAME``)."""
    encoded = value.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_TOKEN_NAME or not value.isprintable():
        return HASHED_TOKEN + hashlib.blake2b(encoded, digest_size=16).hexdigest()
    for raw, escaped in _ESCAPES:
        value = value.replace(raw, escaped)
    return value or "%00"


def untoken(value: str) -> str:
    """The name ``token`` escaped (its inverse); a hashed token stays as it is (the name it
    stands for is not in the subject: read it from the envelope)."""
    if value == "%00":
        return ""
    if value.startswith(HASHED_TOKEN):
        return value
    for raw, escaped in reversed(_ESCAPES):
        value = value.replace(escaped, raw)
    return value


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
        """Everything the log stream holds: facts, decisions, holds, announcements, passes."""
        return [f"{self.prefix}.{root}.>" for root in LOG_ROOTS]

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

    def fleet(self, cluster: ClusterName, state: str) -> str:
        """Where the watcher of ``cluster`` says it is ``connected`` or ``disconnected``
        (M1); NATS lets only that watcher publish there."""
        return f"{self.prefix}.cluster.fleet.{token(cluster)}.{token(state)}"

    def cluster_lost(self, cluster: ClusterName) -> str:
        """Where an operator declares ``cluster`` lost (M1); no watcher may publish there."""
        return f"{self.prefix}.cluster.lost.{token(cluster)}"

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
        return f"{self.prefix}.zone.{token(zone)}.served"

    def pass_ran(self, zone: Zone) -> str:
        """Where the dequeuer of ``zone`` records a pass that proposed something (``PassRan``,
        D4); NATS lets only that dequeuer publish there."""
        return f"{self.prefix}.pass.{token(zone)}.ran"

    @property
    def zones_served(self) -> str:
        """Filter matching every zone's ``ZoneServed`` subject."""
        return f"{self.prefix}.zone.*.served"

    def served_zone(self, subject: str) -> Zone | None:
        """The zone of a ``zone_served`` subject (or of its legacy one, ``MIGRATION_WINDOW``);
        None for any other subject."""
        for head, tail in ((f"{self.prefix}.zone.", ".served"), self._legacy_served):
            if subject.startswith(head) and subject.endswith(tail):
                middle = subject[len(head) : -len(tail)]
                return None if not middle or "." in middle else Zone(untoken(middle))
        return None

    @property
    def _legacy_served(self) -> tuple[str, str]:
        return f"{self.prefix}.decision.", ".zone.served"

    def legacy_home(self, event: LogEvent) -> str | None:
        """The subject ``event`` was published on before it left ``<p>.decision.>`` (holds,
        zone announcements, pass records), which readers accept for ``MIGRATION_WINDOW``;
        None for an event that never moved."""
        match event:
            case NodeHeld() | NodeResumed():
                return f"{self.prefix}.decision.hold.{token(event.node)}"
            case PassRan():
                return f"{self.prefix}.decision.{token(event.zone)}.pass.ran"
            case ZoneServed():
                head, tail = self._legacy_served
                return f"{head}{token(event.zone)}{tail}"
        return None

    def owner_problem(self, subject: str, envelope: Envelope) -> str | None:
        """Why ``envelope`` on ``subject`` is not what its owner would have put on this log;
        None when it is.

        A hold, zone announcement or pass record is also believed on the subject it had
        before it left ``decision.>`` (``legacy_home``, for ``MIGRATION_WINDOW``).
        A decision is believed only on the very subject its owner's builder gives it and
        from its owner's source: the ledger's ``Admitted``/``Preempted``/``Released``/
        ``Requeued`` on the subject of their own action and workload (an admission also of
        its zone; the others are filed under the allocation's zone, which the event does not
        carry), and its holds, drains and resumes (R14/R15) on ``<p>.hold.<node>``; a dequeuer's
        ``Retried`` (R12), ``Unmapped``, ``Inadmissible``, ``PassRan`` (D4) and
        ``ZoneServed`` from the dequeuer of the zone the subject names (NATS lets only that
        dequeuer publish there). A cluster's connection or disconnection only on its own
        ``fleet`` subject from a watcher, its loss only on its ``cluster_lost`` subject from
        the operator (M1). Any other cluster event only on a cluster subject (only a watcher
        may publish there): on a decision subject it is forged."""
        event = envelope.event
        tag = type(event).__struct_config__.tag
        if isinstance(event, CLUSTER_EVENT_TYPES) and not isinstance(
            event, ZoneServed | ClusterConnected | ClusterDisconnected | ClusterLost
        ):
            if subject.startswith(f"{self.prefix}.cluster."):
                return None
            return f"a {tag} on {subject!r}, which is not a cluster subject of {self.prefix!r}"
        home, owner = self.owner_on(event, subject)
        if subject not in (home, self.legacy_home(event)):
            return f"a {tag} on {subject!r}; it belongs on {home!r}"
        if not _is_owner(envelope.source, owner):
            return f"a {tag} from {envelope.source!r}; only {owner!r} makes it"
        return None

    def owner(self, event: LogEvent, zone: Zone) -> tuple[str, str]:
        """The subject ``event`` belongs on and the source that makes it; ``zone`` is the
        zone to file it under when the event does not say its own (``Preempted``,
        ``Released``, ``Requeued``: the allocation's; ``Inadmissible``: its dequeuer's). A
        cluster event: the ``<p>.cluster.`` subject of its kind, from the watcher."""
        return self._owner_at(event, token(zone), zone)

    def owner_on(self, event: LogEvent, subject: str) -> tuple[str, str]:
        """``owner`` with the zone ``subject`` names (any zone's will do where the event
        does not say its own)."""
        zone = self._zone_token(subject)
        return self._owner_at(event, zone, Zone(untoken(zone)))

    def _owner_at(self, event: LogEvent, zone_token: str, zone: Zone) -> tuple[str, str]:
        match event:
            case NodeHeld() | NodeResumed():
                return self.hold(event.node), LEDGER_SOURCE
            case PassRan():
                return self.pass_ran(event.zone), _dequeuer(event.zone)
            case ZoneServed():
                return self.zone_served(event.zone), _dequeuer(event.zone)
            case ClusterConnected():
                return self.fleet(event.cluster, "connected"), WATCHER_SOURCE
            case ClusterDisconnected():
                return self.fleet(event.cluster, "disconnected"), WATCHER_SOURCE
            case ClusterLost():
                return self.cluster_lost(event.cluster), OPERATOR_SOURCE
            case Admitted() | Retried() | Unmapped():
                owner = LEDGER_SOURCE if isinstance(event, Admitted) else _dequeuer(event.zone)
                return self.decision_for(event, event.zone), owner
        if not isinstance(event, DECISION_TYPES):
            return f"{self.prefix}.cluster.{type(event).__name__.lower()}", WATCHER_SOURCE
        namespace, _, name = event.workload.partition("/")
        action = DECISION_ACTIONS[type(event)]
        home = f"{self.prefix}.decision.{zone_token}.{action}.{token(namespace)}.{token(name)}"
        if isinstance(event, LEDGER_DECISION_TYPES):
            return home, LEDGER_SOURCE
        return home, _dequeuer(zone)

    def _zone_token(self, subject: str) -> str:
        """The zone token of a decision subject as it is written (``<zone>`` if none)."""
        head = f"{self.prefix}.decision."
        parts = subject[len(head) :].split(".") if subject.startswith(head) else []
        return parts[0] if len(parts) == 4 and parts[0] else "<zone>"

    def job_anywhere(self, namespace: str, name: str) -> str:
        """Filter matching ``job``'s subject in every zone: the cluster events of one job."""
        return f"{self.prefix}.cluster.*.job.{token(namespace)}.{token(name)}"

    def about_workload(self, namespace: str, name: str) -> list[str]:
        """Filters (none overlapping, as a consumer's ``filter_subjects`` must be) that match
        every entry its owner may have made about workload ``namespace/name``: its cluster
        events, its decisions, and every preemption and retry decision, since a ``Preempted``
        names its preemptor and a ``Retried`` its next attempt only in its body."""
        tail = f"{token(namespace)}.{token(name)}"
        crossing = {DECISION_ACTIONS[Preempted], DECISION_ACTIONS[Retried]}
        own = sorted(set(DECISION_ACTIONS.values()) - crossing)
        return [
            self.job_anywhere(namespace, name),
            *(f"{self.prefix}.decision.*.{token(action)}.{tail}" for action in own),
            *(f"{self.prefix}.decision.*.{token(action)}.>" for action in sorted(crossing)),
        ]

    def is_decision(self, subject: str) -> bool:
        """Whether ``subject`` is one of this installation's decision subjects."""
        return subject.startswith(f"{self.prefix}.decision.")

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
        return f"{self.prefix}.hold.{token(node)}"

    @property
    def holds(self) -> str:
        """Every hold, drain and resume the ledger records (only the ledger may publish)."""
        return f"{self.prefix}.hold.*"

    @property
    def preempt_request(self) -> str:
        """Dequeuers propose a reclaim here; the preemptor checks it and asks the ledger."""
        return f"{self.prefix}.preempt.request"

    def dlq(self, service: str) -> str:
        return f"{self.prefix}.dlq.{token(service)}"


LOG_ROOTS: Final = ("cluster", "decision", "hold", "zone", "pass")
"""The second token of every subject on the log (``<p>.<root>.>``)."""

_ANY_ROOT: Final = re.compile("|".join(re.escape(f".{root}.") for root in LOG_ROOTS))
"""Where a subject's first ``.<root>.`` of ``LOG_ROOTS`` is (``prefix_of``: on every publish)."""

WATCHER_SOURCE: Final = "usher/watcher"
"""The envelope source of every cluster event (a watcher, their only publisher) but
``ClusterLost``."""

OPERATOR_SOURCE: Final = "usher/operator"
"""The envelope source of an operator's declaration that a cluster is lost (M1)."""


def _dequeuer(zone: Zone) -> str:
    """The envelope source of the dequeuer of ``zone``."""
    return f"{DEQUEUER_SOURCE}/{zone}"


def _is_owner(source: str, owner: str) -> bool:
    """Whether ``source`` is ``owner``; a dequeuer's zone read back from a subject whose
    token is a hash (``untoken``) is compared as that token."""
    head = f"{DEQUEUER_SOURCE}/"
    if source == owner or not (source.startswith(head) and owner.startswith(head)):
        return source == owner
    zone = owner[len(head) :]
    return zone.startswith(HASHED_TOKEN) and token(source[len(head) :]) == zone


def prefix_of(subject: str) -> str | None:
    """The installation prefix of a log subject (what precedes its first ``.<root>.`` of
    ``LOG_ROOTS``), None for a subject that is none: the log stream holds only
    ``<prefix>.<root>.>``, so a reader knows whose log it reads from the entry itself (an
    export read offline, a log imported under another prefix)."""
    if subject.startswith("."):  # a root found at 0 is no prefix's end, nor is a later one
        found = [at for at in (subject.find(f".{root}.") for root in LOG_ROOTS) if at > 0]
        return subject[: min(found)] if found else None
    first = _ANY_ROOT.search(subject)  # the leftmost of every root's first place
    return subject[: first.start()] if first else None


def installation_of(subject: str) -> str:
    """The installation a subject of the log belongs to, as ``ce-source`` names it: its
    prefix (``prefix_of``), else its first token."""
    return prefix_of(subject) or subject.split(".", 1)[0]


def owner_problem(subject: str, envelope: Envelope) -> str | None:
    """``Subjects.owner_problem`` for the installation the subject itself names."""
    prefix = prefix_of(subject)
    if prefix is None:
        tag = type(envelope.event).__struct_config__.tag
        return f"a {tag} on {subject!r}, which is no subject of any log"
    return Subjects(prefix).owner_problem(subject, envelope)
