"""With each service's own NATS credentials, nothing it may publish changes a reader's engine
unless it owns it.

On a real nats-server with the deploy's and the local stack's users (the fixtures of
test_nats_permissions.py): every service publishes every decision type on every log subject
its permissions let it publish on, from its own source; what the server stores is read back
as the console reads the log, and folded by the fold every reader uses (the dequeuers, the
preemptor, the watcher, the client, replay and audit): the engine's state (its snapshot) is
what it was. Only the combinations its owner would make are left out (they are its job).
"""

from __future__ import annotations

import msgspec
import pytest

from schemas import LEDGER_SOURCE, Envelope, EventId, LogEvent, WorkloadKey
from tests.builders.log import BASE, Log
from tests.core.test_fold import decisions
from tests.deploy.test_nats_permissions import USERS, login, nats_url, streams
from usher.adapters.nats.export import read_entries
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.permissions import identities
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import snapshot
from usher.core.history.replay import decode_history, fold
from usher.core.model.config import EngineConfig
from usher.core.protocol.subjects import owner_problem

__all__ = ["nats_url", "streams"]  # the fixtures, shared with test_nats_permissions.py

SUBJECTS = Subjects("usher")
SOURCES = {
    "watcher": "usher/watcher",
    "ledger": LEDGER_SOURCE,
    "preemptor": "usher/preemptor",
    **{f"dequeuer-{zone}": f"usher/dequeuer/{zone}" for zone in ("default", "a", "b")},
}


def waiting(name: str) -> list[LogEvent]:
    """Every decision type, about the job that waits (an admission of it would take quota)."""
    key = WorkloadKey(f"user-a/{name}")
    return [
        msgspec.structs.replace(event, workload=key)  # type: ignore[type-var]
        if hasattr(event, "workload")
        else event
        for event in decisions()
    ]


def concrete(pattern: str, name: str) -> list[str]:
    """Log subjects ``pattern`` (a publish permission) allows, about ``user-a/<name>``."""
    if not pattern.startswith(("usher.cluster.", "usher.decision.")):
        return []
    if pattern == "usher.cluster.>":
        return [f"usher.cluster.default.job.user-a.{name}", "usher.cluster.quota"]
    out = []
    for zone in ("default", "a", "b"):
        subject = pattern.replace("*", zone, 1).replace("*", "root")
        out.append(subject.replace(">", f"user-a.{name}"))
    return sorted(set(out))


def may_publish_on_the_log(user: str) -> list[str]:
    [identity] = [i for i in identities(SUBJECTS) if i.name == user]
    return sorted({subject for pattern in identity.publish for subject in concrete(pattern, user)})


async def state_of_the_log(url: str) -> bytes:
    async with login(url, "console") as console:
        history = decode_history(await read_entries(console.nc.jetstream(), SUBJECTS))
    engine = Engine(EngineConfig())
    fold(engine, history.items)
    return snapshot(engine)


@pytest.mark.parametrize("user", USERS)
async def test_nothing_a_service_may_publish_changes_an_engine_unless_it_owns_it(
    streams: str, user: str
) -> None:
    base = Log().tree(0).job(1, "user-a/first", 60).admitted(1.1, "user-a/first", 60)
    base.job(2, f"user-a/{user}", 60)  # waits: the tree is full
    async with login(streams, "admin") as admin:
        for subject, envelope in base.entries:  # written as their owners write them
            await publish_envelope(admin.nc.jetstream(), subject, envelope)
    before = await state_of_the_log(streams)
    stored = 0
    async with login(streams, user) as session:
        js = session.nc.jetstream()
        for subject in may_publish_on_the_log(user):
            for number, event in enumerate(waiting(user)):
                envelope = _envelope(f"{user}:{subject}:{number}", event, SOURCES[user])
                if owner_problem(subject, envelope) is None:
                    continue  # its own decision: what it is there to make
                await publish_envelope(js, subject, envelope)
                stored += 1
    assert session.refused == []
    if user != "preemptor":  # it may put nothing on the log at all
        assert stored >= len(decisions())
    assert await state_of_the_log(streams) == before


def _envelope(id: str, event: LogEvent, source: str) -> Envelope:
    return Envelope(id=EventId(id), time=BASE, source=source, event=event)
