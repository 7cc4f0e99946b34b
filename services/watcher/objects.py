"""The last object the cluster showed for each live workload: patches without a GET first.

What it does: ``LastSeen`` keeps, per workload, the object its watch (or list) last showed, or
the server's answer to our own patch, without ``metadata.managedFields`` (nobody here reads
them; they are most of a real object's bytes). Carrying out a decision builds its merge patch
from this copy; the patch carries the copy's ``resourceVersion``, so a copy that is behind the
server fails with 409 Conflict and is never applied: the caller then drops it (``drop``) and
reads the server's copy. An object leaves when its watch says DELETED, when a relist no longer
has it, when it finishes (no decision patches a finished job), on a conflict, and, past
``capacity`` objects, least recently stored first (a miss only costs the GET it replaces).
What it must never do: hold an object the watch said is gone, grow without bound, or be the
only word for "there is nothing to do" (a copy that says so may be behind: the caller asks the
server before skipping a decision).
"""

from __future__ import annotations

from collections import OrderedDict

from schemas import WorkloadKey
from usher.adapters.kube import JsonObj, Resource

DEFAULT_CAPACITY = 10_000
"""Objects kept at most: a batch Job as the emulator serves it takes about 3.9 kB decoded, so
about 40 MB at most; past that the job whose object was stored longest ago is read again."""


class LastSeen:
    """The last known object of each live, unfinished workload, bounded, oldest out first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, not {capacity}")
        self.capacity = capacity
        self._objects: OrderedDict[WorkloadKey, tuple[tuple[str, str], JsonObj]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._objects)

    def put(self, key: WorkloadKey, resource: Resource, obj: JsonObj) -> None:
        """Remember ``obj`` (of ``resource``) as the workload's latest object."""
        if self.capacity == 0:
            return
        self._objects[key] = (resource.storage, _without_managed_fields(obj))
        self._objects.move_to_end(key)
        while len(self._objects) > self.capacity:
            self._objects.popitem(last=False)

    def get(self, key: WorkloadKey, resource: Resource) -> JsonObj | None:
        """The workload's last object, if it is one of ``resource``'s (else None: read it)."""
        kept = self._objects.get(key)
        if kept is None or kept[0] != resource.storage:
            return None
        return kept[1]

    def drop(self, key: WorkloadKey) -> None:
        """Forget the workload's object (deleted, finished, or behind the server)."""
        self._objects.pop(key, None)


def _without_managed_fields(obj: JsonObj) -> JsonObj:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or "managedFields" not in metadata:
        return obj
    slim = {k: v for k, v in metadata.items() if k != "managedFields"}
    return {**obj, "metadata": slim}
