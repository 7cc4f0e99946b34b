"""Where the client finds Usher: the running one-machine stack, or a real installation.

What it does: resolves the Kubernetes kubeconfig, the NATS URL, the subject prefix and the
decision settings (policy, oversell rate...) from, in order: explicit arguments, ``USHER_*``
environment variables, the running stack's ``$USHER_HOME/stack.json``, and finally
``KUBECONFIG`` for the cluster; ``USHER_KUBE_CONTEXT`` picks a context of a kubeconfig given
by argument or ``USHER_KUBECONFIG``.
What it must never do: connect to anything, or keep a password in anything it prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import msgspec

from schemas import Zone
from usher.adapters.stack_file import StackInfo, read_stack_info, usher_home
from usher.client.errors import BadInput, NotRunning
from usher.core.model.config import POLICIES, WITHIN_QUOTA_MODES, EngineConfig, Policy


@dataclass(frozen=True)
class Target:
    """One Usher installation as a client sees it."""

    kubeconfig: Path | None
    nats_url: str | None
    prefix: str = "usher"
    engine: EngineConfig = field(default_factory=EngineConfig)
    zones: tuple[str, ...] = ()
    """Zones served by a dequeuer (known for the embedded stack only)."""
    home: Path | None = None
    """The embedded stack's folder, when the target is the running stack."""
    admin_nats_url: str | None = None
    """The admin identity's URL: the only one that may ask the ledger for a hold (R14)."""
    kube_context: str | None = None
    """The kubeconfig's context to use (``$USHER_KUBE_CONTEXT``, set by ``kubectl usher
    --context``); None: its current context."""

    def need_kubernetes(self) -> Path:
        if self.kubeconfig is None:
            raise NotRunning(
                "no Kubernetes API: start the system with `usher up`, or pass --kubeconfig"
            )
        if not self.kubeconfig.exists():
            raise NotRunning(f"kubeconfig {self.kubeconfig} does not exist")
        return self.kubeconfig

    def need_nats(self) -> str:
        if not self.nats_url:
            raise NotRunning("no Usher log: start the system with `usher up`, or pass --nats")
        return self.nats_url


def _stack(home: Path) -> StackInfo | None:
    try:
        return read_stack_info(home)
    except FileNotFoundError:
        return None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise NotRunning(f"{home / 'stack.json'} is unreadable ({exc}); remove it") from exc


def _engine(
    policy: str, rate: str, within: str, min_runtime_s: float, half_life_s: float | None = None
) -> EngineConfig:
    if policy not in POLICIES:
        raise BadInput(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if within not in WITHIN_QUOTA_MODES:
        raise BadInput(f"within-quota must be one of {', '.join(WITHIN_QUOTA_MODES)}")
    try:
        fraction = Fraction(rate)
    except (ValueError, ZeroDivisionError) as exc:
        raise BadInput(f"oversell rate is not a number: {rate!r}") from exc
    try:
        return EngineConfig(
            policy=Policy(policy),
            oversell_rate=fraction,
            within_quota=within,
            min_runtime_ms=int(min_runtime_s * 1000),
            half_life_ms=None if half_life_s is None else round(half_life_s * 1000),  # F1
        )
    except ValueError as exc:
        raise BadInput(str(exc)) from exc


def target_of_stack(info: StackInfo) -> Target:
    """The embedded stack described by ``info`` exactly (no environment consulted)."""
    return Target(
        kubeconfig=Path(info.kubeconfig) if info.kubeconfig else None,
        nats_url=info.nats_url,
        prefix=info.prefix,
        engine=_engine(
            info.policy, info.oversell_rate, info.within_quota, info.min_runtime_s, info.half_life_s
        ),
        zones=tuple(Zone(z) for z in info.zones),
        home=Path(info.home),
        admin_nats_url=info.admin_nats_url or None,
    )


def resolve_target(
    *,
    home: Path | None = None,
    kubeconfig: str | Path | None = None,
    nats_url: str | None = None,
    prefix: str | None = None,
    policy: str | None = None,
) -> Target:
    """The installation to talk to; raises ``NotRunning`` when there is none to find."""
    env = os.environ
    if refused := env.get("USHER_KUBE_CONTEXT_REFUSED"):  # kubectl usher: see usher.cli.kubectl
        raise NotRunning(refused)
    folder = home or usher_home()
    # A kubeconfig context chosen for a cluster (kubectl usher --context) is that installation
    # only: the local stack's addresses and settings must not leak into it.
    chosen = env.get("USHER_KUBE_CONTEXT") and (kubeconfig or env.get("USHER_KUBECONFIG"))
    stack = None if chosen else _stack(folder)
    kube = (
        kubeconfig
        or env.get("USHER_KUBECONFIG")
        or (stack.kubeconfig if stack and stack.kubeconfig else None)
        or env.get("KUBECONFIG")
    )
    nats = nats_url or env.get("USHER_NATS_URL") or (stack.nats_url if stack else None)
    if kube is None and nats is None:
        raise NotRunning(
            f"no Usher is running (no stack.json in {folder}): start one with `usher up`, "
            "or name an installation with --kubeconfig and --nats"
        )
    engine = _engine(
        policy or env.get("USHER_POLICY") or (stack.policy if stack else "Round"),
        env.get("USHER_OVERSELL_RATE") or (stack.oversell_rate if stack else "1"),
        env.get("USHER_WITHIN_QUOTA") or (stack.within_quota if stack else "Never"),
        stack.min_runtime_s if stack else float(env.get("USHER_MIN_RUNTIME_SECONDS", "0") or 0),
        stack.half_life_s if stack else None,
    )
    return Target(
        kubeconfig=Path(kube) if kube else None,
        nats_url=nats,
        prefix=prefix or env.get("USHER_PREFIX") or (stack.prefix if stack else "usher"),
        engine=engine,
        zones=tuple(Zone(z) for z in stack.zones) if stack else (),
        home=folder if stack else None,
        admin_nats_url=env.get("USHER_ADMIN_NATS_URL")
        or (stack.admin_nats_url if stack and stack.admin_nats_url else None),
        # A context names an entry of a kubeconfig someone gave, never of the stack's own.
        kube_context=env.get("USHER_KUBE_CONTEXT") if chosen else None,
    )
