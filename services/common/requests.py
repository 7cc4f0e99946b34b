"""Request/reply to the ledger (and the preemptor) with retries that are safe to repeat.

What it does: sends one typed request, decodes a ``ReserveReply`` or a ``LedgerError``, and
retries the very same request (same ``request_id``) after a timeout, a missing responder or a
transient ledger error, with capped exponential backoff, until it gets an answer or the
service is stopping. The ledger is idempotent per workload, so a repeat never counts twice.
``untrusted_reply`` is what every request handler (the ledger's, the preemptor's) checks
first: a request counts only if its reply subject is a requester's inbox; anything else (a
JetStream delivery, whose reply is ``$JS.ACK...``: a consumer someone pointed at a request
subject, which NATS permissions cannot forbid) is parked unanswered.
What it must never do: give up silently, retry a permanent error, or serve a request that no
requester sent.
"""

from __future__ import annotations

import random

import msgspec
import nats.errors

from schemas import LedgerError, ReserveReply, encode
from services.common.retry import Stopping
from services.common.runtime import ServiceContext, wait_or_stop


class PermanentReplyError(Exception):
    """The responder answered with a permanent error, or with something undecodable."""

    def __init__(self, subject: str, code: str, detail: str) -> None:
        super().__init__(f"{subject}: {code}: {detail}")
        self.subject = subject
        self.code = code
        self.detail = detail


_reply_decoder = msgspec.json.Decoder(ReserveReply | LedgerError)

INBOX_PREFIX = "_INBOX."
"""Where every requester (nats-py's ``request``) waits for its answer; the identities may
subscribe to replies there only (usher/adapters/nats/permissions.py)."""


class UntrustedReply(Exception):
    """A request whose reply subject is not a requester's inbox: not sent by a requester."""

    def __init__(self, subject: str, reply: str) -> None:
        shown = reply if len(reply) <= 200 else reply[:200] + "..."
        super().__init__(
            f"a request on {subject} answering to {shown or 'nobody'!r}, not to a requester's "
            f"inbox ({INBOX_PREFIX}...): a JetStream delivery or a message nobody waits for"
        )
        self.subject = subject
        self.reply = reply


def untrusted_reply(subject: str, reply: str) -> UntrustedReply | None:
    """Why a request on ``subject`` answering to ``reply`` is not served; None if it is."""
    if reply.startswith(INBOX_PREFIX) and len(reply) > len(INBOX_PREFIX):
        return None
    return UntrustedReply(subject, reply)


async def ask(
    ctx: ServiceContext,
    subject: str,
    message: msgspec.Struct,
    *,
    timeout_s: float | None = None,
    max_backoff_s: float = 2.0,
    deadline_attempts: int | None = None,
) -> ReserveReply:
    """Send ``message`` until a ``ReserveReply`` comes back (see the module docstring)."""
    payload = encode(message)
    timeout = timeout_s if timeout_s is not None else ctx.settings.request_timeout_s
    attempt = 0
    while True:
        attempt += 1
        try:
            raw = await ctx.nc.request(subject, payload, timeout=timeout)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            ctx.log.warning(
                "request unanswered, retrying",
                subject=subject,
                attempt=attempt,
                error=type(exc).__name__,
            )
        else:
            reply = _decode(subject, raw.data)
            if isinstance(reply, ReserveReply):
                return reply
            if not reply.transient:
                raise PermanentReplyError(subject, reply.code, reply.message)
            ctx.log.warning(
                "transient ledger error, retrying",
                subject=subject,
                code=reply.code,
                attempt=attempt,
            )
        if deadline_attempts is not None and attempt >= deadline_attempts:
            raise PermanentReplyError(subject, "unanswered", f"no reply after {attempt} attempts")
        # Jittered, capped backoff: racing dequeuers must not retry in lockstep.
        delay = min(max_backoff_s, 0.05 * 2 ** min(attempt, 6)) * (0.5 + random.random())
        if await wait_or_stop(ctx.stop, delay):
            raise Stopping(subject)


def _decode(subject: str, data: bytes) -> ReserveReply | LedgerError:
    try:
        reply: ReserveReply | LedgerError = _reply_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        # UnicodeDecodeError: msgspec lets a bad byte in a tag value escape as one.
        raise PermanentReplyError(subject, "bad-reply", str(exc)) from exc
    return reply


__all__ = [
    "INBOX_PREFIX",
    "PermanentReplyError",
    "Stopping",
    "UntrustedReply",
    "ask",
    "untrusted_reply",
]
