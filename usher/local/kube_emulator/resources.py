"""The resource types the Kubernetes API emulator serves, and the write rules of each.

What it does: describes one served resource (``ResourceType``: group, version, plural, kind,
scope, status subresource, extra field selectors), lists every served one (``RESOURCES``: the
built-in types Usher touches, every custom job kind of the registry, the quota CRDs) and finds
one by its URL (``find_resource``, ``resource``).
What it must never do: hold objects, apply a write rule itself or do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from usher.core.kinds import OBSERVED


@dataclass(frozen=True)
class ResourceType:
    """One served resource (group, version, plural) and the write rules the server applies."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    builtin: bool = True
    short_names: tuple[str, ...] = ()
    keep_status_on_create: bool = False
    initial_status: tuple[tuple[str, str], ...] = ()
    extra_fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``jobs.batch`` / ``pods``: how the real server names the resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> tuple[str, str]:
        """Versions of one group/plural share storage (CRD conversion strategy ``None``)."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def allows_unconditional_update(self) -> bool:
        """Built-in types accept a PUT without resourceVersion; custom resources do not."""
        return self.builtin


def _crd(group: str, version: str, plural: str, kind: str, *short: str) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        status_subresource=True,
        builtin=False,
        short_names=short,
    )


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        namespaced=False,
        status_subresource=True,
        short_names=("ns",),
        initial_status=(("phase", "Active"),),
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "node",
        "Node",
        namespaced=False,
        status_subresource=True,
        short_names=("no",),
        keep_status_on_create=True,
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        status_subresource=True,
        short_names=("po",),
        initial_status=(("phase", "Pending"),),
        extra_fields=("spec.nodeName", "status.phase"),
    ),
    ResourceType(
        "",
        "v1",
        "events",
        "event",
        "Event",
        short_names=("ev",),
        extra_fields=(
            "involvedObject.kind",
            "involvedObject.name",
            "involvedObject.namespace",
            "involvedObject.uid",
            "reason",
            "type",
        ),
    ),
    ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", short_names=("cm",)),
    ResourceType("", "v1", "limitranges", "limitrange", "LimitRange", short_names=("limits",)),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "job",
        "Job",
        status_subresource=True,
        extra_fields=("status.successful",),
    ),
    ResourceType(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        namespaced=False,
        short_names=("pc",),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "lease", "Lease"),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        namespaced=False,
    ),
    # Every custom job kind of the registry, admitted or only observed to be rejected.
    *(
        _crd(family.group, version, family.plural, family.kind, *family.short_names)
        for family in OBSERVED
        if not family.builtin
        for version in family.emulated_versions
    ),
    _crd(
        "scheduling.sigs.k8s.io",
        "v1beta1",
        "elasticquotatrees",
        "ElasticQuotaTree",
        "eqt",
        "eqtree",
    ),
    _crd("scheduling.x-k8s.io", "v1alpha1", "queues", "Queue"),
)


def find_resource(group: str, version: str, plural: str) -> ResourceType | None:
    """The served resource at ``/apis/<group>/<version>/<plural>``, if any."""
    for rt in RESOURCES:
        if (rt.group, rt.version, rt.plural) == (group, version, plural):
            return rt
    return None


def resource(group: str, version: str, plural: str) -> ResourceType:
    """The served resource at ``/apis/<group>/<version>/<plural>`` (KeyError if not served)."""
    found = find_resource(group, version, plural)
    if found is None:
        raise KeyError(f"{plural}.{group}/{version} is not served by the emulator")
    return found
