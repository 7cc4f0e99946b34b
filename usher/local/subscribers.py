"""Mint a subscriber identity for the local stack: ``usher subscriber NAME``.

What it does: gives consuming system ``NAME`` the NATS identity ``subscriber-NAME``
(usher/adapters/nats/permissions.py: consumers on the decision stream and nothing else) on the
running ``usher up``: a password in ``$USHER_HOME/credentials.json``, the running
nats-server's config rewritten with every subscriber the credentials hold and reloaded
(SIGHUP; a restart of the server keeps them, ``NatsServer.launch``), and the URL with the
password written owner-only to ``$USHER_HOME/subscribers/NAME.url``. Minting a name again
keeps its password (the same URL).
What it must never do: print or log a password, change another identity, or signal a process
that is not the stack's nats-server.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from usher.adapters.nats.permissions import (
    DEFAULT_ZONES,
    inbox_prefix,
    subscriber,
    subscriber_name,
)
from usher.adapters.nats.subjects import Subjects
from usher.adapters.stack_file import read_stack_info
from usher.core.values.clusters import parse_cluster_zones
from usher.local.credentials import load_credentials, private_dir, write_private
from usher.local.processes import pid_alive
from usher.local.servers import HOST, NatsServer

SUBSCRIBERS_DIR = "subscribers"


class NoStack(Exception):
    """No running ``usher up`` whose nats-server could take the new identity."""


@dataclass(frozen=True)
class SubscriberAccess:
    """What a consuming system needs (the password only in the file ``url_file``)."""

    user: str
    url_file: Path
    stream: str
    subjects: str
    durable: str
    inbox_prefix: str


def mint(home: Path, system: str) -> SubscriberAccess:
    """Give ``system`` its subscriber identity on the stack running in ``home``."""
    info = read_stack_info(home)
    subjects = Subjects(info.prefix)
    identity = subscriber(subjects, system)  # refuses a bad name before anything is written
    creds = load_credentials(home, [subscriber_name(system)])
    port = urlsplit(info.nats_url).port
    pid = info.pids.get("nats", 0)
    if port is None or not pid or not pid_alive(pid):
        raise NoStack(f"the nats-server of the stack in {home} is not running")
    server = NatsServer(
        home,
        port=port,
        sync_always=info.durable,
        prefix=info.prefix,
        zones=tuple(info.zones) or DEFAULT_ZONES,
        passwords=creds.nats,
        clusters=parse_cluster_zones(info.clusters, "clusters") if info.clusters else None,
    )
    write_private(server.config_path, server.config_text().encode())
    os.kill(pid, signal.SIGHUP)  # nats-server reloads its config: the new user can log in
    password = quote(creds.nats[identity.name], safe="")
    url_file = private_dir(home / SUBSCRIBERS_DIR) / f"{system}.url"
    write_private(url_file, f"nats://{identity.user}:{password}@{HOST}:{port}\n".encode())
    return SubscriberAccess(
        user=identity.user,
        url_file=url_file,
        stream=subjects.stream_name,
        subjects=subjects.all_decisions,
        durable=system,
        inbox_prefix=inbox_prefix(system),
    )
