"""Run the Kubernetes API emulator until SIGTERM/SIGINT.

What it does: ``python -m usher.local.kube_emulator --port 0 --kubeconfig PATH [--kubelet]
[--virtual-node ZONE]`` starts the emulator on 127.0.0.1 (with a virtual kubelet's node for
each ``--virtual-node`` zone, Z3), writes the kubeconfig, prints the URL and waits for a signal.
What it must never do: bind anything but 127.0.0.1 unless told with ``--host``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from usher.local.kube_emulator.server import KubeEmulator
from usher.local.kube_emulator.store import CLUSTER_NAMESPACES, Store
from usher.local.kube_emulator.virtual_node import add_virtual_node


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m usher.local.kube_emulator")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: a free one)")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="kubeconfig to write")
    parser.add_argument("--kubelet", action="store_true", help="run the fake kubelet")
    parser.add_argument("--speed", type=float, default=1.0, help="kubelet clock speed-up")
    parser.add_argument("--bookmark-interval", type=float, default=60.0, help="seconds")
    parser.add_argument("--history", type=int, default=1000, help="watch events kept")
    parser.add_argument(
        "--virtual-node",
        action="append",
        default=[],
        metavar="ZONE",
        help="serve a virtual kubelet's node of this zone (large allocatable); repeatable",
    )
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NAME",
        help="a namespace the cluster starts with, beside the system ones; repeatable",
    )
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    store = Store(history_size=args.history, strict_namespaces=True, validate=True)
    store.ensure_namespaces((*CLUSTER_NAMESPACES, *args.namespace))
    for zone in args.virtual_node:
        add_virtual_node(store, zone)
    emulator = KubeEmulator(
        host=args.host,
        port=args.port,
        kubeconfig_path=args.kubeconfig,
        store=store,
        kubelet=args.kubelet,
        kubelet_speed=args.speed,
        bookmark_interval=args.bookmark_interval,
    )
    async with emulator:
        print(emulator.url, flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
