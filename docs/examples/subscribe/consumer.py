"""Read Usher's decisions from another system: a durable pull consumer, validated.

Needs ``pip install nats-py "jsonschema[format-nongpl]"``. Environment: ``NATS_URL`` (the
subscriber identity's URL, e.g. ``$(cat ~/.usher/subscribers/billing.url)``), ``USHER_SYSTEM``
(your system's name: the subscriber ``subscriber-<system>``), ``USHER_PREFIX`` (``usher``),
``USHER_SCHEMAS`` (a copy of Usher's ``schemas/json``). ``--until-caught-up`` stops once
every decision so far is read; without it, it follows the stream live. Run it again: the
durable consumer resumes after the last decision it acknowledged.
"""

import asyncio
import json
import os
import sys
from pathlib import Path

import jsonschema
import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
SYSTEM = os.environ.get("USHER_SYSTEM", "example")
PREFIX = os.environ.get("USHER_PREFIX", "usher")
SCHEMAS = Path(os.environ.get("USHER_SCHEMAS", "schemas/json"))
STREAM = PREFIX.upper().replace("-", "_") + "_LOG"


async def main(follow: bool) -> dict[str, object]:
    schema = json.loads((SCHEMAS / "Envelope.json").read_text())
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
    # The subscriber identity may only use inboxes under _INBOX.<system>.
    nc = await nats.connect(URL, inbox_prefix=f"_INBOX.{SYSTEM}")
    js = nc.jetstream()
    durable = ConsumerConfig(
        name=SYSTEM,
        durable_name=SYSTEM,
        filter_subject=f"{PREFIX}.decision.>",
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,  # from the start, the first time only
    )
    await js.add_consumer(STREAM, durable)  # the same config again: no change
    sub = await js.pull_subscribe_bind(durable=SYSTEM, stream=STREAM)
    read, invalid, types = 0, [], set()
    while True:
        info = await js.consumer_info(STREAM, SYSTEM)
        if not follow and info.num_pending == 0 and info.num_ack_pending == 0:
            break
        try:
            batch = await sub.fetch(100, timeout=1)
        except TimeoutError:  # nothing yet (nats-py raises its own or asyncio's)
            continue
        for msg in batch:
            envelope = json.loads(msg.data)
            errors = [e.message for e in validator.iter_errors(envelope)]
            event = envelope.get("event", {})
            ce_type = (msg.headers or {}).get("ce-type")
            if ce_type != f"io.usher.{event.get('type')}":
                errors.append(f"ce-type {ce_type!r}")
            if errors:
                invalid.append({"subject": msg.subject, "errors": errors})
            print(event.get("type"), event.get("workload"), file=sys.stderr)
            types.add(event.get("type"))
            read += 1
            await msg.ack()
    await nc.drain()
    return {"read": read, "types": sorted(types), "invalid": invalid}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(follow="--until-caught-up" not in sys.argv))))
