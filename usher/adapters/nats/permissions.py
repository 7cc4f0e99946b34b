"""Who may publish and subscribe to what on NATS: the one source of every Usher identity.

What it does: lists, per identity of one installation (watcher, ledger, preemptor, one
dequeuer per zone, a read-only ``console`` for people and audits, and the ``admin`` that
creates and configures the streams), the subjects it may publish and subscribe to, and renders
them as a nats-server ``authorization`` block: with ``$USHER_<NAME>_NATS_PASSWORD`` variables
for ``deploy/nats/usher-auth.conf`` (and the Helm values ``deploy/nats-values.yaml``), or with
literal passwords for the local stack (``usher up``). ``python -m usher.adapters.nats.permissions
--write`` regenerates the deploy files; a test checks they equal what this module renders.
Only the ledger may publish ``Admitted``/``Preempted``/``Released``; a dequeuer only its own
zone's ``Inadmissible``/``Unmapped``; only the admin may create, update, delete or purge a
stream (services look the log up, they never reconfigure it).
What nats-server cannot enforce: the deliver subject of a push consumer is in the request's
body, not its subject, and the server does not check it against the creator's permissions
(nats-io/nats-server#8274); an ordered consumer (what every reader, the console included,
follows the log with) is a push consumer created on ``$JS.API.CONSUMER.CREATE.<stream>``, so
any identity that may read the log may point a consumer at another subject, e.g. a request
subject. The request handlers therefore serve only requests that answer to a requester's
inbox (``services.common.requests.untrusted_reply``) and park the rest.
What it must never do: talk to a server, read a file, or hold a password it was not given.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas import DEFAULT_CLUSTER, ClusterName, Zone
from usher.adapters.nats.subjects import Subjects, token
from usher.core.values.clusters import ClusterZones

DEFAULT_ZONES = ("default", "a", "b")
ADMIN = "admin"
CONSOLE = "console"
LEDGER = "ledger"
DECISIONS_OF_THE_LEDGER = ("admitted", "preempted", "released", "requeued")
DECISIONS_OF_A_DEQUEUER = ("inadmissible", "unmapped", "retried")
SUBSCRIBER = "subscriber"
DEFAULT_SUBSCRIBERS = ("example",)
"""The subscribers deploy/'s files name: one ``subscriber-<system>`` per consuming system
(``example`` is the template: add yours to this tuple and regenerate)."""


@dataclass(frozen=True)
class Identity:
    """One NATS user: its name (``ledger``, ``dequeuer-a``...) and its allow lists."""

    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...] = ("_INBOX.>",)
    allow_responses: bool = False
    deny_publish: tuple[str, ...] = ()
    """Exceptions to ``publish`` (what a wildcard there would otherwise let through)."""

    @property
    def user(self) -> str:
        return f"usher-{self.name}"

    @property
    def password_variable(self) -> str:
        return password_variable(self.name)


def password_variable(name: str) -> str:
    """``USHER_<NAME>_NATS_PASSWORD``: where the deploy's server config reads the password."""
    return f"USHER_{name.upper().replace('-', '_')}_NATS_PASSWORD"


def _stem(subjects: Subjects) -> str:
    return subjects.prefix.upper().replace("-", "_")


def _follow_log(subjects: Subjects) -> list[str]:
    """Look the log up and follow it with an ordered (ephemeral) consumer: every service.

    The ordered consumer asks for its own info when heartbeats stop (CONSUMER.INFO).
    """
    log, dlq = subjects.stream_name, subjects.dlq_stream_name
    return [
        "$JS.API.INFO",
        f"$JS.API.STREAM.INFO.{log}", f"$JS.API.STREAM.INFO.{dlq}",
        f"$JS.API.CONSUMER.CREATE.{log}", f"$JS.API.CONSUMER.INFO.{log}.*", f"$JS.FC.{log}.>",
    ]  # fmt: skip


def _snapshots(subjects: Subjects, owner: str) -> list[str]:
    """The engine snapshot bucket (an object store, not the log), own meta subject only.

    Read back message by message (``STREAM.MSG.GET``, usher/adapters/nats/snapshots.py):
    no consumer on the bucket, so no ``CONSUMER.CREATE``/flow control subjects at all.
    """
    bucket = f"{_stem(subjects)}_SNAPSHOTS"
    meta = base64.urlsafe_b64encode(owner.encode()).decode()
    return [
        f"$JS.API.STREAM.INFO.OBJ_{bucket}", f"$JS.API.STREAM.CREATE.OBJ_{bucket}",
        f"$JS.API.STREAM.MSG.GET.OBJ_{bucket}", f"$JS.API.STREAM.PURGE.OBJ_{bucket}",
        f"$O.{bucket}.C.>", f"$O.{bucket}.M.{meta}",
    ]  # fmt: skip


def _views(subjects: Subjects, *, write: bool) -> list[str]:
    """The people read models (bucket ``<PREFIX>_VIEWS``, ``usher.client.readmodel``): read
    back as the snapshots are (``STREAM.INFO`` and ``STREAM.MSG.GET``, no consumer); only the
    service that keeps them (the preemptor) may create the bucket and put its objects."""
    stream = f"OBJ_{_stem(subjects)}_VIEWS"
    read = [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}"]
    if not write:
        return read
    bucket = f"{_stem(subjects)}_VIEWS"
    return [*read, f"$JS.API.STREAM.CREATE.{stream}", f"$JS.API.STREAM.PURGE.{stream}",
            f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]  # fmt: skip


def _leader_key(subjects: Subjects, key: str) -> list[str]:
    """The leader bucket ``<prefix>_LEADERS`` (case kept): only this role's own key."""
    bucket = f"{subjects.prefix}_LEADERS"
    return [
        f"$KV.{bucket}.{key}",
        f"$JS.API.STREAM.INFO.KV_{bucket}", f"$JS.API.STREAM.CREATE.KV_{bucket}",
        f"$JS.API.STREAM.MSG.GET.KV_{bucket}",
        f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{key}",
    ]  # fmt: skip


def watcher(
    subjects: Subjects, clusters: ClusterZones | None = None, cluster: str = DEFAULT_CLUSTER
) -> Identity:
    """The watcher of ``cluster`` (M1). The default cluster's (the only one of a
    single-cluster installation) publishes every cluster event but what belongs to another
    cluster of ``clusters`` (its zones' jobs and nodes, its connection); another cluster's
    publishes only its own zones' jobs and nodes and its own connection. No watcher may
    declare a cluster lost (``<p>.cluster.lost.>``: the operator's, ``admin``)."""
    log, p = subjects.stream_name, subjects.prefix
    name = watcher_name(ClusterName(cluster))
    durable = f"{p}-{name}"
    own = (
        f"$JS.API.CONSUMER.INFO.{log}.{durable}",
        f"$JS.API.CONSUMER.CREATE.{log}.{durable}", f"$JS.API.CONSUMER.CREATE.{log}.{durable}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{log}.{durable}",
        f"$JS.API.CONSUMER.MSG.NEXT.{log}.{durable}", f"$JS.ACK.{log}.{durable}.>",
    )  # fmt: skip
    lost = (f"{p}.cluster.lost.>",)
    if cluster == DEFAULT_CLUSTER:
        others = [
            subject
            for other, zones in (clusters or {}).items()
            if other != DEFAULT_CLUSTER
            for subject in _cluster_subjects(subjects, other, zones)
        ]
        return Identity(
            name,
            (f"{p}.cluster.>", subjects.dlq("watcher"), *_follow_log(subjects), *own),
            deny_publish=(*lost, *others),
        )
    zones = (clusters or {}).get(ClusterName(cluster), ())
    return Identity(
        name,
        (*_cluster_subjects(subjects, cluster, zones), subjects.dlq("watcher"),
         *_follow_log(subjects), *own),
        deny_publish=lost,
    )  # fmt: skip


def _cluster_subjects(subjects: Subjects, cluster: str, zones: Sequence[str]) -> list[str]:
    """What only the watcher of ``cluster`` may publish: its zones' jobs and nodes, and
    whether it is connected (M1)."""
    p = subjects.prefix
    return [
        *(f"{p}.cluster.{token(zone)}.job.>" for zone in zones),
        *(f"{p}.cluster.node.{token(zone)}.>" for zone in zones),
        f"{p}.cluster.fleet.{token(cluster)}.>",
    ]


def watcher_name(cluster: ClusterName) -> str:
    """The watcher of ``cluster``: its NATS identity and the name of its durable consumer
    (``watcher`` for the default cluster, as in a single-cluster installation)."""
    return "watcher" if cluster == DEFAULT_CLUSTER else f"watcher-{cluster}"


def ledger(subjects: Subjects) -> Identity:
    p = subjects.prefix
    decisions = [f"{p}.decision.*.{action}.>" for action in DECISIONS_OF_THE_LEDGER]
    return Identity(
        LEDGER,
        (*decisions, subjects.holds, subjects.dlq(LEDGER), *_follow_log(subjects),
         *_leader_key(subjects, "ledger-relay")),
        subscribe=(
            "_INBOX.>", subjects.ledger_reserve, subjects.ledger_preempt, subjects.ledger_requeue,
            subjects.ledger_holds,
        ),
        allow_responses=True,
    )  # fmt: skip


def preemptor(subjects: Subjects) -> Identity:
    return Identity(
        "preemptor",
        (subjects.ledger_preempt, subjects.dlq("preemptor"), *_follow_log(subjects),
         *_snapshots(subjects, "preemptor"), *_views(subjects, write=True),
         *_leader_key(subjects, "preemptor")),
        subscribe=("_INBOX.>", subjects.preempt_request),
        allow_responses=True,
    )  # fmt: skip


def dequeuer(subjects: Subjects, zone: str) -> Identity:
    p, name = subjects.prefix, f"dequeuer-{zone}"
    decisions = [f"{p}.decision.{token(zone)}.{action}.>" for action in DECISIONS_OF_A_DEQUEUER]
    return Identity(name, (
        *decisions, subjects.zone_served(Zone(zone)), subjects.pass_ran(Zone(zone)),
        subjects.ledger_reserve,
        subjects.ledger_requeue, subjects.preempt_request, subjects.dlq("dequeuer"),
        *_follow_log(subjects), *_snapshots(subjects, name), *_leader_key(subjects, name),
    ))  # fmt: skip


def console(subjects: Subjects) -> Identity:
    """People, ``usher.client``, the live view and audits: read the log, the DLQ and the
    people read models the preemptor keeps, only."""
    log, dlq = subjects.stream_name, subjects.dlq_stream_name
    return Identity(CONSOLE, (
        *_follow_log(subjects), f"$JS.API.CONSUMER.CREATE.{dlq}", f"$JS.FC.{dlq}.>",
        f"$JS.API.STREAM.MSG.GET.{log}", f"$JS.API.STREAM.MSG.GET.{dlq}",
        f"$JS.API.DIRECT.GET.{log}", f"$JS.API.DIRECT.GET.{log}.>",
        *_views(subjects, write=False),
    ))  # fmt: skip


SYSTEM_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")
"""A consuming system's name: one DNS label (it is a subject token and a consumer name)."""


def inbox_prefix(system: str) -> str:
    """The inbox prefix subscriber ``system``'s client must use (``inboxPrefix`` in nats.js,
    ``inbox_prefix`` in nats-py): the only core subjects it may subscribe to."""
    return f"_INBOX.{system}"


def subscriber_name(system: str) -> str:
    """The identity of consuming system ``system``: ``subscriber-<system>``."""
    return f"{SUBSCRIBER}-{system}"


def subscriber(subjects: Subjects, system: str, others: Sequence[str] = ()) -> Identity:
    """Another system reading the decision stream (``<p>.decision.>``), and nothing else.

    It may look the log up and create consumers on it -- durable or ordered, pull or push --
    whose filter is within ``<p>.decision.>`` (the filter is in the subject of the create
    request, ``CONSUMER.CREATE.<log>.<name>.<filter>``, so the server checks it; the legacy
    create without name or filter in the subject is refused). It may pull from and read the
    info of consumers on the log, and ack and delete only its own durable, named ``<system>``
    (its consumer-name prefix: NATS matches whole tokens, so an acked consumer is named exactly
    that; an ordered consumer, which never acks, may have any name). The watcher's durable and
    the other subscribers' (``others``) are out of reach. No publish to any stream, no
    stream change, no message get, and no core subscription but its own inboxes,
    ``_INBOX.<system>.>`` (the client's inbox prefix is ``_INBOX.<system>``: it sees no other
    client's replies).
    """
    if not SYSTEM_NAME.fullmatch(system):
        raise ValueError(f"subscriber name {system!r}: lower-case letters, digits and '-' only")
    log, p = subjects.stream_name, subjects.prefix
    decisions = subjects.all_decisions
    foreign = [f"{p}-watcher", *others]
    return Identity(
        subscriber_name(system),
        (
            "$JS.API.INFO", f"$JS.API.STREAM.INFO.{log}",
            f"$JS.API.CONSUMER.CREATE.{log}.*.{decisions}",
            f"$JS.API.CONSUMER.INFO.{log}.*", f"$JS.API.CONSUMER.MSG.NEXT.{log}.*",
            f"$JS.API.CONSUMER.DELETE.{log}.{system}", f"$JS.ACK.{log}.{system}.>",
            f"$JS.FC.{log}.>",
        ),
        subscribe=(f"{inbox_prefix(system)}.>",),
        deny_publish=tuple(
            subject
            for name in foreign
            for subject in (
                f"$JS.API.CONSUMER.CREATE.{log}.{name}.>", f"$JS.API.CONSUMER.INFO.{log}.{name}",
                f"$JS.API.CONSUMER.MSG.NEXT.{log}.{name}",
            )
        ),
    )  # fmt: skip


def admin() -> Identity:
    """Creates and configures the streams (``usher up``, the deploy's set-up Job), imports."""
    return Identity(ADMIN, (">",), subscribe=(">",))


def identities(
    subjects: Subjects,
    zones: Sequence[str] = DEFAULT_ZONES,
    subscribers: Sequence[str] = (),
    clusters: ClusterZones | None = None,
) -> list[Identity]:
    """Every identity of the installation ``subjects.prefix`` whose dequeuers serve ``zones``,
    with a ``subscriber-<system>`` for each of ``subscribers`` and a ``watcher-<cluster>`` for
    each cluster of ``clusters`` but the default one (M1)."""
    readers = [subscriber(subjects, s, [o for o in subscribers if o != s]) for s in subscribers]
    workers = [
        watcher(subjects, clusters, cluster)
        for cluster in (clusters or {})
        if cluster != DEFAULT_CLUSTER
    ]
    return [
        watcher(subjects, clusters), *workers, ledger(subjects), preemptor(subjects),
        *(dequeuer(subjects, zone) for zone in zones), console(subjects), admin(), *readers,
    ]  # fmt: skip


def subscribers_of(names: Iterable[str]) -> list[str]:
    """The systems of the ``subscriber-<system>`` identities among ``names`` (the local stack
    keeps them in its credentials: ``usher subscriber``), sorted."""
    head = f"{SUBSCRIBER}-"
    return sorted(name[len(head) :] for name in names if name.startswith(head))


# ---------------------------------------------------------------------- rendering

HEADER = """\
# NATS users of one Usher installation (subject prefix `{prefix}`). GENERATED by
# `python -m usher.adapters.nats.permissions --write` from usher/adapters/nats/permissions.py
# (the one source of these lists; `usher up` renders the same with its own passwords).
# Do not edit by hand: tests/deploy/test_nats_permissions.py compares this file with the module.
#
#   watcher    {prefix}.cluster.>  + its durable consumer `{prefix}-watcher`, never
#              {prefix}.cluster.lost.>  (an operator declares a cluster lost: admin, M1)
#   watcher-<cluster>  another cluster's (M1): only {prefix}.cluster.<its zone>.job.>,
#              {prefix}.cluster.node.<its zone>.>, {prefix}.cluster.fleet.<cluster>.>
#   ledger     {prefix}.decision.*.{{admitted,preempted,released,requeued}}.>  + replies
#              {prefix}.hold.*  (records holds, drains and resumes: R14/R15)
#              serves {prefix}.ledger.hold.<identity>: who asks is the subject's identity
#   dequeuer   {prefix}.decision.<zone>.{{inadmissible,unmapped,retried}}.>  (own zone only)
#              {prefix}.zone.<zone>.served  (announces that it serves its zone)
#              {prefix}.pass.<zone>.ran  (records a pass that proposed something)
#              requests {prefix}.ledger.reserve, {prefix}.ledger.requeue,
#              {prefix}.preempt.request
#   preemptor  requests {prefix}.ledger.preempt  + replies to {prefix}.preempt.request
#              keeps the people read models (object store {stem}_VIEWS): the only writer
#   console    reads the log, the DLQ and {stem}_VIEWS (people, usher.client, audits);
#              publishes nothing
#              (ordered push consumers bound to the log; no durable, no pull consumer)
#   subscriber-<system>  another system: consumers (durable or ordered, pull or push) on the
#              log filtered within {prefix}.decision.>; acks and deletes only its durable
#              named <system>; nothing else (docs/how-to/subscribe.md)
#   admin      everything: creates and updates the streams ({log}, {dlq}), imports logs,
#              asks for holds ({prefix}.ledger.hold.admin: `usher hold|drain|resume`),
#              declares a cluster lost ({prefix}.cluster.lost.<cluster>: `usher cluster lost`)
#   services   {prefix}.dlq.<service>, STREAM.INFO (never CREATE/UPDATE/DELETE/PURGE) of the
#              log, an ordered consumer on it, their snapshot and leader keys
#
# Passwords come from the environment (NATS config variables): set them from Secrets.
# Adding a zone: add it to ZONES in deploy (`--zones`) and regenerate.
"""


def _quoted(items: Sequence[str]) -> str:
    return ", ".join(json.dumps(item) for item in items)


def _user_block(identity: Identity, password: str) -> list[str]:
    lines = [
        "    {",
        f"      user: {identity.user}",
        f"      password: {password}",
        "      permissions: {",
        "        publish: {",
        "          allow: [",
    ]
    lines += [f"            {json.dumps(s)}{',' if i < len(identity.publish) - 1 else ''}"
              for i, s in enumerate(identity.publish)]  # fmt: skip
    lines += ["          ]"]
    if identity.deny_publish:
        lines += ["          deny: ["]
        lines += [f"            {json.dumps(s)}{',' if i < len(identity.deny_publish) - 1 else ''}"
                  for i, s in enumerate(identity.deny_publish)]  # fmt: skip
        lines += ["          ]"]
    lines += [
        "        }",
        f"        subscribe: {{ allow: [{_quoted(identity.subscribe)}] }}",
    ]
    if identity.allow_responses:
        lines.append("        allow_responses: true")
    lines += ["      }", "    }"]
    return lines


def render_authorization(
    subjects: Subjects,
    zones: Sequence[str] = DEFAULT_ZONES,
    passwords: Mapping[str, str] | None = None,
    subscribers: Sequence[str] | None = None,
    clusters: ClusterZones | None = None,
) -> str:
    """The ``authorization`` block; ``passwords`` None means ``$USHER_<NAME>_NATS_PASSWORD``.
    ``subscribers`` None: those ``passwords`` has (``subscribers_of``), or deploy/'s;
    ``clusters``: a ``watcher-<cluster>`` for each but the default one (M1)."""
    if subscribers is None:
        subscribers = DEFAULT_SUBSCRIBERS if passwords is None else subscribers_of(passwords)
    header = HEADER.format(
        prefix=subjects.prefix,
        log=subjects.stream_name,
        dlq=subjects.dlq_stream_name,
        stem=_stem(subjects),
    )
    lines = [header, "authorization {", "  users: ["]
    for identity in identities(subjects, zones, subscribers, clusters):
        password = (
            f"${identity.password_variable}"
            if passwords is None
            else json.dumps(passwords[identity.name])
        )
        lines += _user_block(identity, password)
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


SYNC_INTERVAL = "always"
"""The deploy's choice: a publish is acknowledged only once fsynced on a quorum of replicas."""
STREAM_REPLICAS = 3

VALUES_HEADER = """\
# Values for the official NATS Helm chart (1.x). GENERATED by
# `python -m usher.adapters.nats.permissions --write` (usher/adapters/nats/permissions.py);
# tests/deploy/test_nats_permissions.py compares it with the module.
#
# A 3-node JetStream cluster on file storage; Usher's streams are created with
# USHER_STREAM_REPLICAS={replicas} (deploy/base/settings.yaml, by the admin in the usher-migrate
# Job), so every entry of the log is on 3 nodes and an acknowledged publish is on a quorum (2).
# sync_interval: {sync}: the server fsyncs before it acknowledges, so an acknowledged entry also
# survives the machines of a quorum losing power together (the default, a 2-minute fsync
# interval, would lose up to 2 minutes of acknowledged decisions then). It costs a disk flush
# per publish batch; the decisions rate of one cluster is far below what that allows.
#
# The users of deploy/nats/usher-auth.conf are included from a ConfigMap, their passwords
# from a Secret as environment variables:
#   kubectl create namespace nats
#   kubectl create configmap nats-usher-auth -n nats --from-file=deploy/nats/usher-auth.conf
#   kubectl create secret generic nats-usher-passwords -n nats \\
#     --from-literal=USHER_WATCHER_NATS_PASSWORD=... (one per user, see container.env)
#   helm repo add nats https://nats-io.github.io/k8s/helm/charts/
#   helm upgrade --install nats nats/nats -n nats -f deploy/nats-values.yaml
#
# TLS for clients is on: the server certificate is the Secret nats-server-tls in namespace nats
# (tls.crt, tls.key: a cert-manager Certificate for nats.nats.svc); Usher's pods verify it with
# the CA in usher-nats-tls (deploy/components/nats-tls) and connect with tls:// URLs.
"""


def render_nats_values(
    subjects: Subjects,
    zones: Sequence[str] = DEFAULT_ZONES,
    *,
    replicas: int = STREAM_REPLICAS,
    sync: str = SYNC_INTERVAL,
) -> str:
    """``deploy/nats-values.yaml``: cluster, JetStream sync, the users' password variables."""
    lines = [VALUES_HEADER.format(replicas=replicas, sync=sync).rstrip("\n"), "config:",
             "  cluster:", "    enabled: true", f"    replicas: {replicas}",
             "  jetstream:", "    enabled: true", "    fileStore:", "      enabled: true",
             "      dir: /data", "      pvc:", "        enabled: true", "        size: 20Gi",
             "    merge:", f"      sync_interval: {sync}",
             "  nats:", "    tls:", "      enabled: true", "      secretName: nats-server-tls",
             "  merge:",
             "    # nats.conf gets `include usher/usher-auth.conf` (relative to /etc/nats-config).",
             "    00$include: usher/usher-auth.conf", "container:", "  env:"]  # fmt: skip
    for identity in identities(subjects, zones, DEFAULT_SUBSCRIBERS):
        variable = identity.password_variable
        lines += [
            f"    {variable}:",
            "      valueFrom:",
            f"        secretKeyRef: {{name: nats-usher-passwords, key: {variable}}}",
        ]
    lines += [
        "  patch:", "    - op: add", "      path: /volumeMounts/-",
        "      value: {name: usher-auth, mountPath: /etc/nats-config/usher, readOnly: true}",
        "podTemplate:", "  patch:", "    - op: add", "      path: /spec/volumes/-",
        "      value: {name: usher-auth, configMap: {name: nats-usher-auth}}", "",
    ]  # fmt: skip
    return "\n".join(lines)


DEPLOY_AUTH = Path("nats") / "usher-auth.conf"
DEPLOY_VALUES = Path("nats-values.yaml")


def deploy_files(deploy: Path) -> dict[Path, str]:
    """What ``deploy/`` must hold, by path: the users and the Helm values."""
    subjects = Subjects("usher")
    return {
        deploy / DEPLOY_AUTH: render_authorization(subjects),
        deploy / DEPLOY_VALUES: render_nats_values(subjects),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m usher.adapters.nats.permissions")
    parser.add_argument("--deploy", type=Path, default=Path("deploy"))
    parser.add_argument("--write", action="store_true", help="write the files (else: check)")
    args = parser.parse_args(argv)
    stale: list[Path] = []
    for path, text in deploy_files(args.deploy).items():
        if args.write:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(path)
    for path in stale:
        print(f"{path}: differs from usher/adapters/nats/permissions.py (run with --write)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
