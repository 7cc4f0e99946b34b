"""``services.common.requests.ask`` over a real NATS server: replies it cannot read."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from schemas import RequestId, ReserveRequest, Zone
from services.common.requests import PermanentReplyError, ask
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings
from tests.conftest import Infra
from usher.adapters.logs import get_logger
from usher.adapters.nats.subjects import Subjects


@pytest.mark.parametrize(
    "reply",
    [b"{not json", b'{"type":"\x80edger.reserve.reply.v1"}'],
    ids=["malformed", "bad-utf8-tag"],
)
async def test_an_unreadable_reply_is_a_permanent_bad_reply(
    infra: Infra, nc: Client, subjects: Subjects, reply: bytes
) -> None:
    async def answer(msg: Msg) -> None:
        await msg.respond(reply)

    subject = subjects.ledger_reserve
    await nc.subscribe(subject, cb=answer)
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix)
    log = get_logger(service="test")
    ctx = ServiceContext("dequeuer", settings, nc, nc.jetstream(), subjects, asyncio.Event(), log)
    request = ReserveRequest(request_id=RequestId("r-1"), zone=Zone("default"), reservations=[])
    with pytest.raises(PermanentReplyError) as refused:
        await ask(ctx, subject, request, timeout_s=2)
    assert (refused.value.subject, refused.value.code) == (subject, "bad-reply")
