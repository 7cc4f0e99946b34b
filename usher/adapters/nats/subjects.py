"""The NATS subject and stream layout of one Usher installation.

What it does: names every subject (cluster events, decisions, ledger request/reply, DLQ) under
one prefix, so tests and parallel installations never see each other's traffic, and escapes
Kubernetes names into subject tokens.
What it must never do: talk to a server; it only computes names.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas import NodeName, Zone

# Characters that NATS treats specially inside a subject token, and their escapes. `%` is
# escaped first so that escaping is reversible and names never collide.
_ESCAPES = (("%", "%25"), (".", "%2E"), ("*", "%2A"), (">", "%3E"), (" ", "%20"))


def token(value: str) -> str:
    """Make ``value`` safe as one subject token (Job names may contain dots)."""
    for raw, escaped in _ESCAPES:
        value = value.replace(raw, escaped)
    return value or "%00"


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
    def preempt_request(self) -> str:
        """Dequeuers propose a reclaim here; the preemptor checks it and asks the ledger."""
        return f"{self.prefix}.preempt.request"

    def dlq(self, service: str) -> str:
        return f"{self.prefix}.dlq.{token(service)}"
