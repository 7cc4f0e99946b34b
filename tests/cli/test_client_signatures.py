"""Each method of the blocking ``Client`` takes the same parameters as its ``AsyncClient`` twin.

They were once written out by hand, and the blocking ``submit`` lacked ``check_zone``; they are
now made from the async ones (``usher.client.client._blocking``). This checks what people and
IDEs read of them: the parameters, the return type and the name ``help()`` shows.
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


@pytest.mark.parametrize("name", TWINS)
def test_each_blocking_method_returns_what_its_twin_does_and_is_named_for_client(
    name: str,
) -> None:
    blocking = getattr(Client, name)
    twin = getattr(AsyncClient, name)
    assert inspect.signature(blocking).return_annotation == (
        inspect.signature(twin).return_annotation
    )
    assert (blocking.__name__, blocking.__qualname__) == (name, f"Client.{name}")
    assert not inspect.iscoroutinefunction(blocking)
