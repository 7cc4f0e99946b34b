"""The emulator's store is copy-on-write: a new version shares what it did not change with the
one before, and nothing reachable from a stored object (or from an event about one) is ever
changed afterwards, whatever writes follow -- hostile sequences of creates, merge and JSON
patches, status writes, updates and deletes, generated. ``shared=True`` hands out the stored
object itself; without it every read and write hands out a copy."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from usher.local.kube_emulator import ApiError, Store, resource
from usher.local.kube_emulator.selectors import Filter
from usher.local.kube_emulator.store import StoreEvent
from usher.local.kube_emulator.wire import clone

JOBS = resource("batch", "v1", "jobs")
NAMES = ("a", "b")

values = st.one_of(st.integers(-3, 3), st.sampled_from(["x", "1", "2Gi"]), st.booleans())
patches = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(st.sampled_from(["k", "l"]), st.sampled_from(["v", "w"]))
            },
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={"suspend": st.booleans(), "parallelism": st.integers(1, 3)},
        ),
        "status": st.dictionaries(st.sampled_from(["active", "ready"]), values),
    },
)
operations = st.lists(
    st.tuples(
        st.sampled_from(["create", "merge", "status-merge", "json", "update", "status", "delete"]),
        st.sampled_from(NAMES),
        patches,
    ),
    max_size=25,
)


def _job(name: str) -> dict[str, Any]:
    container = {"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    return {"metadata": {"name": name}, "spec": {"suspend": True, "template": template}}


def _apply(store: Store, op: str, name: str, patch: dict[str, Any], shared: bool) -> None:
    if op == "create":
        store.create(JOBS, "ns", _job(name), shared=shared)
    elif op in ("merge", "status-merge"):
        sub = "status" if op == "status-merge" else None
        store.patch(JOBS, "ns", name, "merge", patch, subresource=sub, shared=shared)
    elif op == "json":
        ops = [{"op": "add", "path": "/metadata/annotations", "value": {"n": str(len(patch))}}]
        store.patch(JOBS, "ns", name, "json", ops, shared=shared)
    elif op in ("update", "status"):
        body = store.get(JOBS, "ns", name)
        body["status"] = patch.get("status", {})
        body["spec"]["suspend"] = not body["spec"].get("suspend")
        sub = "status" if op == "status" else None
        store.update(JOBS, "ns", name, body, subresource=sub, shared=shared)
    else:
        store.delete(JOBS, "ns", name, shared=shared)


@settings(max_examples=60, deadline=None)
@given(operations, st.booleans())
def test_no_stored_object_or_event_changes_after_it_was_recorded(
    ops: list[tuple[str, str, dict[str, Any]]], shared: bool
) -> None:
    store = Store(validate=True)
    seen: list[tuple[StoreEvent, Any, Any]] = []
    store.subscribe(lambda e: seen.append((e, clone(e.object), clone(e.previous))))
    for op, name, patch in ops:
        try:
            _apply(store, op, name, patch, shared)
        except ApiError:
            continue
    for event, obj, previous in seen:
        assert event.object == obj
        assert event.previous == previous
        assert event.object["metadata"]["resourceVersion"] == str(event.rv)


def test_an_exact_list_shows_an_object_as_it_was_after_a_patch_that_left_metadata_alone() -> None:
    store = Store()
    made = store.create(JOBS, "ns", _job("a"))
    store.patch(JOBS, "ns", "a", "merge", {"spec": {"suspend": False}})
    rv = made["metadata"]["resourceVersion"]
    listed = store.list_page(JOBS, Filter(), resource_version=rv, resource_version_match="Exact")
    assert [(o["metadata"]["resourceVersion"], o["spec"]["suspend"]) for o in listed.items] == [
        (rv, True)
    ]


def test_shared_hands_out_the_stored_object_and_otherwise_a_copy() -> None:
    store = Store()
    made = store.create(JOBS, "ns", _job("a"), shared=True)
    assert store.get(JOBS, "ns", "a", shared=True) is made
    copy = store.get(JOBS, "ns", "a")
    assert copy == made and copy is not made
    copy["spec"]["suspend"] = False  # a copy may be changed: the store is not
    assert store.get(JOBS, "ns", "a", shared=True)["spec"]["suspend"] is True
