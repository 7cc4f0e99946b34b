"""The emulator's objects kept on disk: a snapshot, and a journal of every write since it.

What it does: ``PersistentStore`` is the store with a snapshot of its objects (``snapshot``)
and an exact restore of one (``restore``: same uid, resourceVersion, creationTimestamp and
status). ``Journal`` makes every write durable before it is acknowledged, as etcd does for a
real API server: it follows the store's change feed and appends each write (its
resourceVersion, type, storage and object) as one JSON line to ``<state>.journal`` with
``os.write``, synchronously inside the write, so before the API server answers it. At start
(``recover``) the snapshot is restored and the journal replayed on top of it (only the lines
past the snapshot's resourceVersion; a torn last line, written when the process was killed
in the middle of a write nobody was answered for, is dropped); ``compact`` writes a fresh
snapshot atomically (a sibling renamed over) and then empties the journal, which the owner
does now and then (``due``) and on a clean stop. The resourceVersion counter never goes back:
the snapshot and every journal line carry it.
The journal is written without ``fsync``: what the process handed to the kernel survives the
process being killed (SIGKILL, a crash), which is what the local stack's restarts and the
tests that kill it need; a power cut or kernel crash may still lose the last writes.
What it must never do: acknowledge a write it has not handed to the kernel, write a half
snapshot, let a resourceVersion go back after a restart, or keep a history to resume old
watches from (after a restart older resourceVersions are 410 Gone, as a restarted
kube-apiserver's watch cache answers them: clients list again).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from usher.local.credentials import private_dir, write_private
from usher.local.kube_emulator.resources import RESOURCES, ResourceType
from usher.local.kube_emulator.store import Store, StoreEvent
from usher.local.kube_emulator.wire import JsonObj, encode_json

STATE_VERSION = 1
JOURNAL_SUFFIX = ".journal"
COMPACT_AT_LEAST_BYTES = 4 * 1024 * 1024
"""The journal is folded into the snapshot once it is at least this large and larger than
the snapshot itself (so compaction costs stay proportional to the writes)."""


def storage_types() -> dict[str, ResourceType]:
    """One served type per storage (``group/plural``): versions of a resource share objects."""
    out: dict[str, ResourceType] = {}
    for rt in RESOURCES:
        out.setdefault(f"{rt.group}/{rt.plural}", rt)
    return out


class PersistentStore(Store):
    """The emulator's store, plus a snapshot of its objects and an exact restore of one."""

    def snapshot(self) -> JsonObj:
        """Every object, by storage, and the resourceVersion counter."""
        objects: dict[str, list[JsonObj]] = {}
        for key, rt in storage_types().items():
            items = self.objects(rt)
            if items:
                objects[key] = items
        return {
            "version": STATE_VERSION,
            "resourceVersion": self.resource_version,
            "objects": objects,
        }

    def restore(self, state: JsonObj) -> int:
        """Put the snapshot's objects back exactly as they were; returns how many.

        Must run before anyone watches: older resourceVersions are answered 410 Gone after it
        (there is no history to resume from), so clients list again.
        """
        types = storage_types()
        count = 0
        for key, items in (state.get("objects") or {}).items():
            rt = types.get(key)
            if rt is None or not isinstance(items, list):
                continue
            for obj in items:
                count += self._put(rt, obj)
        rv = state.get("resourceVersion")
        self._resume_at(rv if isinstance(rv, int) else 0)
        return count

    def replay(self, entry: Any) -> bool:
        """Apply one journal line's write (as the store made it); False: not one."""
        if not isinstance(entry, dict) or not isinstance(entry.get("rv"), int):
            return False
        rt = storage_types().get(str(entry.get("storage")))
        obj = entry.get("object")
        if rt is None or not isinstance(obj, dict):
            return False
        if entry.get("type") == "DELETED":
            meta = obj.get("metadata") or {}
            self._bucket(rt).pop(self._key(rt, meta.get("namespace"), str(meta.get("name"))), None)
        elif not self._put(rt, obj):
            return False
        self._resume_at(entry["rv"])
        return True

    def _put(self, rt: ResourceType, obj: Any) -> int:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not meta.get("name"):
            return 0
        self._bucket(rt)[self._key(rt, meta.get("namespace"), str(meta["name"]))] = obj
        return 1

    def _resume_at(self, rv: int) -> None:
        self._rv = max(self._rv, rv)
        self._compacted_rv = self._rv


def load_state(path: Path) -> JsonObj:
    """The saved snapshot, or an empty one (first start). A corrupt file is kept aside."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (ValueError, UnicodeDecodeError):
        path.replace(path.with_suffix(".corrupt"))
        print(f"cluster state {path} unreadable; kept as {path.name}.corrupt", file=sys.stderr)
        return {}
    return state if isinstance(state, dict) else {}


def save_state(path: Path, store: PersistentStore) -> int:
    """Write the snapshot atomically (write a sibling, then rename over), owner-only (0600 in
    a 0700 folder: jobs' specs and environment are in it); returns its size."""
    private_dir(path.parent)
    data = json.dumps(store.snapshot(), separators=(",", ":")).encode()
    write_private(path, data)
    return len(data)


def journal_line(event: StoreEvent) -> bytes:
    """One write as the journal keeps it (a deletion keeps only the object's name)."""
    obj = event.object
    if event.type == "DELETED":
        meta = obj["metadata"]
        obj = {"metadata": {"name": meta["name"], "namespace": meta.get("namespace", "")}}
    entry = {"rv": event.rv, "type": event.type, "storage": "/".join(event.storage_key)}
    return encode_json({**entry, "object": obj}) + b"\n"


class Journal:
    """The snapshot at ``state`` and the journal beside it, for one ``PersistentStore``."""

    def __init__(self, state: Path, store: PersistentStore) -> None:
        self.state = state
        self.path = state.with_name(state.name + JOURNAL_SUFFIX)
        self.store = store
        self._fd: int | None = None
        self._size = 0
        self._snapshot_size = 0
        self._unsubscribe: Callable[[], None] | None = None

    def recover(self) -> int:
        """Restore the snapshot, then replay the journal past it; how many objects the
        snapshot held plus how many writes were replayed."""
        restored = self.store.restore(load_state(self.state))
        since = self.store.resource_version
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return restored
        replayed = 0
        for line in raw.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                break  # a torn last line: its write was never acknowledged
            if isinstance(entry, dict) and isinstance(entry.get("rv"), int) and entry["rv"] > since:
                replayed += self.store.replay(entry)
        return restored + replayed

    def start(self) -> None:
        """Fold what was recovered (and written since) into a fresh snapshot, then journal
        every write from now on."""
        if self._fd is not None:
            return
        self.compact_now()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._fd = os.open(self.path, flags, 0o600)
        self._unsubscribe = self.store.subscribe(self._append)

    def due(self) -> bool:
        """Whether the journal has grown enough to be folded into a new snapshot."""
        return self._size >= max(COMPACT_AT_LEAST_BYTES, self._snapshot_size)

    def compact_now(self) -> None:
        """A new snapshot of every object, then an empty journal (a kill in between leaves
        lines the snapshot already has: replay skips them by resourceVersion)."""
        self._snapshot_size = save_state(self.state, self.store)
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.path, 0)
        self._size = 0

    def close(self) -> None:
        """Stop journaling; a last snapshot holds everything."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.compact_now()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _append(self, event: StoreEvent) -> None:
        assert self._fd is not None
        data = memoryview(journal_line(event))
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
            self._size += written
