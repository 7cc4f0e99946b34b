"""Each method of the blocking ``Client`` takes the same parameters as its ``AsyncClient`` twin.

It is written out by hand (so that an IDE shows real signatures); this keeps the copy from
drifting: the blocking ``submit`` once lacked ``check_zone``.
"""

from __future__ import annotations

import inspect

import pytest

from usher.client.client import AsyncClient, Client

TWINS = sorted(
    name
    for name, member in inspect.getmembers(Client, inspect.isfunction)
    if not name.startswith("_") and inspect.iscoroutinefunction(getattr(AsyncClient, name, None))
)


def test_the_people_verbs_have_twins() -> None:
    assert {"submit", "submit_manifest", "wait", "delete", "list_jobs", "apply"} <= set(TWINS)


@pytest.mark.parametrize("name", TWINS)
def test_each_blocking_method_takes_the_async_parameters(name: str) -> None:
    blocking = getattr(Client, name)
    wanted = inspect.signature(getattr(AsyncClient, name)).parameters
    given = inspect.signature(blocking).parameters
    assert [(p.name, p.kind, p.default) for p in given.values()] == [
        (p.name, p.kind, p.default) for p in wanted.values()
    ]
