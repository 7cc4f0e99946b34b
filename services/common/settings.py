"""Settings of a running service: where the servers are and how the core decides.

What it does: one frozen dataclass, filled from CLI options, environment variables
(``USHER_*``) or the embedded stack's ``stack.json``, in that order of precedence.
What it must never do: connect to anything or log a secret (``database_url`` is redacted
wherever it is shown).
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from schemas import ClusterName, Zone
from usher.adapters.stack_file import StackInfo, read_stack_info, usher_home
from usher.core.model.config import POLICIES, EngineConfig, Policy, WithinQuota
from usher.core.model.errors import ValueRefused
from usher.core.values import numbers
from usher.core.values.clusters import ClusterZones, cluster_name, parse_cluster_zones


class SettingsError(Exception):
    """A setting is missing or malformed; ``name`` says which."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail


@dataclass(frozen=True)
class ServiceSettings:
    """Everything a service needs to start. Every service of one installation shares them."""

    nats_url: str
    database_url: str | None = None
    kubeconfig: Path | None = None
    prefix: str = "usher"
    zone: Zone | None = None
    """The dequeuer's zone (required for it; ignored by the others)."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    request_timeout_s: float = 5.0
    startup_timeout_s: float = 30.0
    """How long a service waits for NATS at start before it gives up (exit, not a hang)."""
    status_interval_s: float = 1.0
    """How often the watcher may rewrite Queue and ElasticQuotaTree status."""
    settle_ms: int = 20
    """A dequeuer waits this long after an event for more before it runs a pass, so events
    that arrive together are decided together (C1, docs/admission-rules.md)."""
    metrics_host: str = "127.0.0.1"
    """Where ``/metrics``, ``/healthz`` and ``/readyz`` listen (the deploy sets 0.0.0.0)."""
    metrics_port: int = 9102
    """Their port: 0 picks a free one, -1 turns the endpoint off."""
    instance: str = field(default_factory=socket.gethostname)
    """This process's identity in leader election (pod or host name). A process restarted
    under the same identity takes its own leadership key back at once."""
    leader_election: bool = True
    """Single-writer roles (dequeuer per zone, preemptor, ledger relay) elect a leader."""
    leader_ttl_s: float = 5.0
    """A leader's key expires this long after its last renewal (renewed every third)."""
    nats_tls_ca: Path | None = None
    """CA bundle (PEM) to verify the NATS server with (``USHER_NATS_TLS_CA``); TLS when set."""
    nats_tls_cert: Path | None = None
    """Client certificate (PEM) for mutual TLS (``USHER_NATS_TLS_CERT``, with the key)."""
    nats_tls_key: Path | None = None
    """Its private key (PEM, ``USHER_NATS_TLS_KEY``)."""
    stream_replicas: int = 1
    """Replicas of the log and DLQ streams (``USHER_STREAM_REPLICAS``; the deploy sets 3). Used
    by whoever creates the streams: the admin (``usher up``, ``usher streams``), or a service
    on an open server where they are missing."""
    notify_url: str | None = None
    """The watcher POSTs each job Event it records there as a CloudEvent
    (``USHER_NOTIFY_URL``, http or https; unset: no webhook)."""
    nats_down_limit_s: float = 30.0
    """``/healthz`` fails once the NATS connection has been down this long
    (``USHER_NATS_DOWN_LIMIT_SECONDS``): the client has tried ~5 full reconnects by then."""

    cluster: ClusterName | None = None
    """The cluster this watcher sees (``USHER_CLUSTER``, M1); None: the one cluster of a
    single-cluster installation (no connection events on the log)."""
    clusters: ClusterZones = field(default_factory=dict)
    """Every cluster's zones (``USHER_CLUSTERS``, ``<cluster>=<zone>,...;...``, M1)."""

    def with_zone(self, zone: Zone) -> ServiceSettings:
        return replace(self, zone=zone)


def parse_rate(raw: str) -> Fraction:
    """An exact oversell rate from ``"1"``, ``"1.5"`` or ``"3/2"``."""
    try:
        rate = Fraction(raw)
    except (ValueError, ZeroDivisionError) as exc:
        raise SettingsError("oversell-rate", f"not a number: {raw!r}") from exc
    if rate <= 0:
        raise SettingsError("oversell-rate", f"must be positive, got {raw!r}")
    return rate


def _half_life_ms(
    explicit: float | None, env: Mapping[str, str], stack: StackInfo | None
) -> int | None:
    """Fair share's half-life (F1): explicit seconds, else ``USHER_HALF_LIFE_SECONDS``
    (``off`` or empty: off), else the running stack's; None (off) when none is given."""
    seconds = explicit
    if seconds is None:
        raw = env.get("USHER_HALF_LIFE_SECONDS")
        if raw is None:
            seconds = stack.half_life_s if stack else None
        elif raw.strip().lower() not in ("", "off"):
            seconds = _seconds("half-life", raw, numbers.MAX_HALF_LIFE_SECONDS)
    if seconds is None:
        return None
    seconds = _seconds("half-life", seconds, numbers.MAX_HALF_LIFE_SECONDS)
    if not seconds > 0 or round(seconds * 1000) <= 0:
        raise SettingsError("half-life", f"must be more than 0 seconds, got {seconds:g}")
    return round(seconds * 1000)


def _seconds(name: str, value: float | str, most: int) -> float:
    """A duration setting in seconds, read by the core's one parser of durations (ASCII
    digits, finite, 0 to ``most``, milliseconds at most): ``inf`` or ``1e400`` is a
    ``SettingsError`` naming it, never a traceback. A float given by a caller is checked as
    the text it prints as."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SettingsError(name, f"must be a finite number of seconds, got {value}")
        value = format(Decimal(value).quantize(Decimal("0.001")), "f")
    try:
        return float(numbers.duration(value, name, high=most))
    except ValueRefused as refused:
        raise SettingsError(name, refused.message.removeprefix(f"{name}: ")) from refused


def with_password(url: str | None, password: str | None) -> str | None:
    """``url`` with ``password`` set in it (``USHER_DATABASE_PASSWORD``: in a cluster the
    Secret CloudNativePG keeps the role's password in, so it has one source, never a copy in
    a URL). Any character may be in the password: it is quoted into the URL."""
    if url is None or not password:
        return url
    # Loaded here: SQLAlchemy costs ~0.1 s of CPU to import, and the CLI's commands that
    # read these settings (``usher explain``, ``replay``) never touch a database.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise SettingsError("database", "not a database URL") from exc
    return parsed.set(password=password).render_as_string(hide_password=False)


def load_settings(
    *,
    nats_url: str | None = None,
    database_url: str | None = None,
    kubeconfig: str | None = None,
    prefix: str | None = None,
    zone: str | None = None,
    policy: str | None = None,
    oversell_rate: str | None = None,
    within_quota: str | None = None,
    min_runtime_s: float | None = None,
    settle_ms: int | None = None,
    home: Path | None = None,
    half_life_s: float | None = None,
) -> ServiceSettings:
    """Resolve settings: explicit values, then ``USHER_*`` variables, then ``stack.json``."""
    env = os.environ
    stack = _stack(home or usher_home())
    nats = nats_url or env.get("USHER_NATS_URL") or (stack.nats_url if stack else None)
    if not nats:
        raise SettingsError("nats", "no NATS URL: pass --nats, set USHER_NATS_URL or run usher up")
    database = with_password(
        database_url or env.get("USHER_DATABASE_URL") or (stack.database_url if stack else None),
        env.get("USHER_DATABASE_PASSWORD"),
    )
    kube = (
        kubeconfig
        or env.get("USHER_KUBECONFIG")
        or env.get("KUBECONFIG")
        or (stack.kubeconfig if stack else None)
    )
    # The running stack's settings are the installation's: every service must agree on them.
    chosen_policy = policy or env.get("USHER_POLICY") or (stack.policy if stack else "Round")
    chosen_within = (
        within_quota or env.get("USHER_WITHIN_QUOTA") or (stack.within_quota if stack else "Never")
    )
    rate = parse_rate(
        oversell_rate or env.get("USHER_OVERSELL_RATE") or (stack.oversell_rate if stack else "1")
    )
    default = str(stack.min_runtime_s) if stack else "0"
    runtime: float | str = (
        min_runtime_s
        if min_runtime_s is not None
        else env.get("USHER_MIN_RUNTIME_SECONDS", default)
    )
    runtime_s = _seconds("min-runtime", runtime, numbers.MAX_SECONDS)
    try:
        engine = EngineConfig(
            policy=_policy(chosen_policy),
            oversell_rate=rate,
            within_quota=_within(chosen_within),
            min_runtime_ms=int(runtime_s * 1000),
            zones=frozenset({Zone(zone)}) if zone else None,
            half_life_ms=_half_life_ms(half_life_s, env, stack),
        )
    except ValueError as exc:
        raise SettingsError("engine", str(exc)) from exc
    settle = settle_ms if settle_ms is not None else int(env.get("USHER_SETTLE_MS", "20"))
    startup = float(env.get("USHER_STARTUP_TIMEOUT_SECONDS", "30"))
    try:
        metrics_port = int(env.get("USHER_METRICS_PORT", "9102"))
        leader_ttl = float(env.get("USHER_LEADER_TTL_SECONDS", "5"))
    except ValueError as exc:
        raise SettingsError("metrics-port/leader-ttl", f"not a number: {exc}") from exc
    if leader_ttl <= 0:
        raise SettingsError("leader-ttl", f"must be positive, got {leader_ttl}")
    replicas = stream_replicas(env.get("USHER_STREAM_REPLICAS", "1"))
    down_limit = nats_down_limit(env.get("USHER_NATS_DOWN_LIMIT_SECONDS", "30"))
    election = env.get("USHER_LEADER_ELECTION", "on").lower() not in ("off", "0", "false")
    tls_ca, tls_cert, tls_key = (
        _tls_file(env, f"USHER_NATS_TLS_{part}") for part in ("CA", "CERT", "KEY")
    )
    if (tls_cert is None) != (tls_key is None):
        missing = "USHER_NATS_TLS_KEY" if tls_key is None else "USHER_NATS_TLS_CERT"
        raise SettingsError(missing, "mutual TLS needs both USHER_NATS_TLS_CERT and _KEY")
    return ServiceSettings(
        nats_url=nats,
        database_url=database,
        kubeconfig=Path(kube) if kube else None,
        prefix=prefix or env.get("USHER_PREFIX") or (stack.prefix if stack else "usher"),
        zone=Zone(zone) if zone else None,
        engine=engine,
        settle_ms=settle,
        startup_timeout_s=startup,
        metrics_host=env.get("USHER_METRICS_HOST", "127.0.0.1"),
        metrics_port=metrics_port,
        instance=env.get("USHER_INSTANCE") or socket.gethostname(),
        leader_election=election,
        leader_ttl_s=leader_ttl,
        nats_tls_ca=tls_ca,
        nats_tls_cert=tls_cert,
        nats_tls_key=tls_key,
        stream_replicas=replicas,
        nats_down_limit_s=down_limit,
        notify_url=notify_url(env.get("USHER_NOTIFY_URL", "")),
        **cluster_settings(env),
    )


def cluster_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """``cluster`` and ``clusters`` from ``USHER_CLUSTER`` and ``USHER_CLUSTERS`` (M1): a named
    cluster must be one of the mapping's."""
    try:
        mapping = (
            parse_cluster_zones(env["USHER_CLUSTERS"], "USHER_CLUSTERS")
            if env.get("USHER_CLUSTERS")
            else {}
        )
        cluster = (
            cluster_name(env["USHER_CLUSTER"], "USHER_CLUSTER")
            if env.get("USHER_CLUSTER")
            else None
        )
    except ValueRefused as refused:
        raise SettingsError(refused.path, refused.message) from refused
    if cluster is not None and cluster not in mapping:
        raise SettingsError("USHER_CLUSTER", f"cluster {cluster} is not one of USHER_CLUSTERS")
    return {"cluster": cluster, "clusters": mapping}


def notify_url(raw: str) -> str | None:
    """``USHER_NOTIFY_URL``: an http(s) URL with a host, or empty (no webhook)."""
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or raw.strip() != raw:
        raise SettingsError("USHER_NOTIFY_URL", "must be an http:// or https:// URL with a host")
    return raw


def nats_down_limit(raw: str) -> float:
    """Seconds of lost NATS connection after which a service is not alive: 1 to 3600."""
    if re.fullmatch(r"[0-9]{1,4}(\.[0-9]{1,3})?", raw) is None:
        raise SettingsError("nats-down-limit", f"not a number of seconds: {raw!r}")
    seconds = float(raw)
    if not 1 <= seconds <= 3600:
        raise SettingsError("nats-down-limit", f"must be 1 to 3600 seconds, got {raw!r}")
    return seconds


@dataclass(frozen=True)
class WebhookSettings:
    """The admission webhook's settings: it needs no NATS, only the API and its TLS files."""

    kubeconfig: Path
    tls_cert: Path
    """Serving certificate (PEM, ``USHER_WEBHOOK_TLS_CERT``; cert-manager's ``tls.crt``)."""
    tls_key: Path
    """Its key (PEM, ``USHER_WEBHOOK_TLS_KEY``)."""
    host: str = "127.0.0.1"
    """``USHER_WEBHOOK_HOST`` (the deploy sets 0.0.0.0)."""
    port: int = 9443
    """``USHER_WEBHOOK_PORT``; 0 picks a free one."""
    tree_ttl_s: float = 5.0
    """How long a listing of the quota trees is reused between reviews."""
    tls_reload_s: float = 10.0
    """``USHER_WEBHOOK_TLS_RELOAD_SECONDS``: how often the TLS files are re-read (a renewed
    certificate is served from the next handshake after)."""


def load_webhook_settings(kubeconfig: str | None = None) -> WebhookSettings:
    """The webhook's settings from ``kubeconfig`` and ``USHER_*`` variables."""
    env = os.environ
    kube = kubeconfig or env.get("USHER_KUBECONFIG") or env.get("KUBECONFIG")
    if not kube:
        raise SettingsError("kubeconfig", "the webhook reads namespaces and trees: set one")
    cert, key = _tls_file(env, "USHER_WEBHOOK_TLS_CERT"), _tls_file(env, "USHER_WEBHOOK_TLS_KEY")
    if cert is None or key is None:
        missing = "USHER_WEBHOOK_TLS_CERT" if cert is None else "USHER_WEBHOOK_TLS_KEY"
        raise SettingsError(missing, "the API server calls webhooks over HTTPS only")
    try:
        port = int(env.get("USHER_WEBHOOK_PORT", "9443"))
    except ValueError as exc:
        raise SettingsError("USHER_WEBHOOK_PORT", f"not a number: {exc}") from exc
    host = env.get("USHER_WEBHOOK_HOST", "127.0.0.1")
    reload_s = _seconds("USHER_WEBHOOK_TLS_RELOAD_SECONDS",
                        env.get("USHER_WEBHOOK_TLS_RELOAD_SECONDS", "10"), 3600)  # fmt: skip
    if reload_s <= 0:
        raise SettingsError("USHER_WEBHOOK_TLS_RELOAD_SECONDS", "must be positive")
    return WebhookSettings(Path(kube), cert, key, host, port, tls_reload_s=reload_s)


MAX_STREAM_REPLICAS = 5
"""JetStream's own limit on a stream's replicas."""


def stream_replicas(raw: str) -> int:
    """Replicas of the streams: 1 to 5 (JetStream's range); R3 survives one node lost."""
    try:
        replicas = int(raw)
    except ValueError as exc:
        raise SettingsError("stream-replicas", f"not a whole number: {raw!r}") from exc
    if not 1 <= replicas <= MAX_STREAM_REPLICAS:
        raise SettingsError("stream-replicas", f"must be 1 to {MAX_STREAM_REPLICAS}, got {raw!r}")
    return replicas


def _tls_file(env: Mapping[str, str], variable: str) -> Path | None:
    """A TLS file named by ``variable``: unset or empty is None, a missing file an error."""
    raw = env.get(variable)
    if not raw:
        return None
    path = Path(raw)
    if not path.is_file():
        raise SettingsError(variable, f"no such file: {raw}")
    return path


def _stack(home: Path) -> StackInfo | None:
    try:
        return read_stack_info(home)
    except FileNotFoundError:
        return None
    except msgspec.DecodeError as exc:
        raise SettingsError("stack.json", f"unreadable in {home}: {exc}") from exc


def _policy(raw: str) -> Policy:
    if raw in POLICIES:
        return Policy(raw)
    raise SettingsError("policy", f"must be Round or Block, got {raw!r}")


def _within(raw: str) -> WithinQuota:
    if raw == "Never":
        return "Never"
    if raw == "LowerPriority":
        return "LowerPriority"
    raise SettingsError("within-quota", f"must be Never or LowerPriority, got {raw!r}")
