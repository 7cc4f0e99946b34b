"""schemas/json/ as another system reads it: plain JSON Schema 2020-12 that strict validators
which did not generate it accept (jsonschema with format checking here, Ajv 2020 in strict
mode through node), with a unit on every quantity and the contract's bounds.

The messages of a real run are validated by tests/e2e/test_subscribe_e2e.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from schemas import export
from schemas.export import DEFAULT_DIR, render_all
from tests.nodejs import node_dir, run_node
from usher.core.values import numbers, registry

SCHEMAS = {name: json.loads(text) for name, text in render_all().items()}
VALIDATE = Path(__file__).parent / "nodejs" / "validate.mjs"


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every object inside a schema, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def properties(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(struct, field, property schema) of every struct a schema defines."""
    for struct, definition in schema["$defs"].items():
        for field, prop in definition.get("properties", {}).items():
            yield struct, field, prop


def branches(prop: dict[str, Any]) -> list[dict[str, Any]]:
    """The non-null alternatives of a property (itself when it is no union)."""
    return [b for b in prop.get("oneOf", [prop]) if b.get("type") != "null"]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_schema_is_valid_json_schema_2020_12(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMAS[name])
    assert SCHEMAS[name]["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_unions_are_one_of_over_const_tags_without_openapi_keywords(name: str) -> None:
    nodes = list(walk(SCHEMAS[name]))
    assert not [n for n in nodes if "discriminator" in n or "anyOf" in n]
    assert not [n for n in nodes if isinstance(n.get("enum"), list) and len(n["enum"]) == 1]
    for struct, definition in SCHEMAS[name]["$defs"].items():
        tag = definition.get("properties", {}).get("type")
        if tag is not None:
            assert set(tag) == {"const", "type"}, (struct, tag)


def test_every_quantity_names_its_unit_and_every_time_its_format() -> None:
    undescribed = []
    for schema in SCHEMAS.values():
        for struct, field, prop in properties(schema):
            kinds = {b.get("type") for b in branches(prop)}
            is_map_of_amounts = any(
                b.get("additionalProperties", {}).get("type") == "integer"
                for b in branches(prop)
                if isinstance(b.get("additionalProperties"), dict)
            )
            if ("integer" in kinds or is_map_of_amounts) and not prop.get("description"):
                undescribed.append(f"{struct}.{field}")
    assert undescribed == []
    envelope = SCHEMAS["Envelope.json"]["$defs"]["Envelope"]["properties"]
    assert envelope["time"]["format"] == "date-time"
    requests = SCHEMAS["Admitted.json"]["$defs"]["Admitted"]["properties"]["requests"]
    assert "millicores" in requests["description"] and "bytes" in requests["description"]
    assert requests["additionalProperties"] == {"type": "integer", "minimum": 0}


def test_bounds_are_the_contracts() -> None:
    assert export.MAX_SECONDS == numbers.MAX_SECONDS
    assert export.MAX_RETRY_LIMIT == registry.MAX_RETRY_LIMIT
    assert export.MAX_REQUEUE_ATTEMPTS == registry.MAX_REQUEUE_ATTEMPTS
    pending = SCHEMAS["Pending.json"]["$defs"]["Pending"]["properties"]["position"]
    assert pending["minimum"] == 1
    retry = SCHEMAS["WorkloadObserved.json"]["$defs"]["RetryAsk"]["properties"]["limit"]
    assert branches(retry) == [{"type": "integer", "minimum": 0, "maximum": 100}]
    seen = {(s, f) for schema in SCHEMAS.values() for s, f, _ in properties(schema)}
    assert set(export.BOUNDS) <= seen, "a bound names a field no schema has"


def test_unknown_fields_stay_allowed_and_out_of_bounds_values_are_refused() -> None:
    schema = SCHEMAS["Envelope.json"]
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
    message = {
        "type": "envelope.v1",
        "id": "dequeuer:a:pending:1",
        "time": "2026-01-31T12:00:00.123Z",
        "source": "usher/dequeuer/a",
        "future_field": {"any": "thing"},
        "event": {
            "type": "decision.pending.v1",
            "workload": "user-a/j",
            "queue": "q",
            "quota": "root/a",
            "position": 1,
            "reason": {"code": "QuotaExceeded", "message": "no room", "later": 1},
            "later": True,
        },
    }
    assert list(validator.iter_errors(message)) == []
    bad_time = {**message, "time": "yesterday"}
    assert [e.validator for e in validator.iter_errors(bad_time)] == ["format"]
    bad_position = {**message, "event": {**message["event"], "position": 0}}
    assert list(validator.iter_errors(bad_position))
    bad_tag = {**message, "event": {**message["event"], "type": "decision.nope.v1"}}
    assert list(validator.iter_errors(bad_tag))


def test_ajv_2020_compiles_every_checked_in_schema_in_strict_mode(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    result = run_node(node_dir(tmp_path_factory), VALIDATE, [str(DEFAULT_DIR)])
    report = json.loads(result.stdout)
    assert report == {"compiled": len(SCHEMAS), "validated": 0, "errors": [], "warnings": []}
    assert result.returncode == 0, result.stderr
