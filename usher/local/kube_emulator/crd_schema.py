"""The CRDs' own schemas, checked as the API server checks a custom resource before storing it.

What it does: reads the CustomResourceDefinitions Usher ships (``crds/*.yaml``, the very files
of deploy/base/crds) and, for an object of one of their kinds, lists what the API server would
refuse, in its words and field paths: the structural OpenAPI v3 schema (types, int-or-string,
required, enum, pattern, min/max length, items and properties bounds) and the CEL rules of
``x-kubernetes-validations`` (``Invalid value: "object": <message>``), evaluated with the
``common-expression-language`` library and the Kubernetes quantity functions rules use
(``quantity``, ``isQuantity``, ``compareTo``, ``sign``, ``isLessThan``, ``isGreaterThan``).
As kube-apiserver, the rules are not run on an object whose types or required fields are wrong
(it says so instead).
What it must never do: I/O besides reading the bundled CRD files once; hold state beyond its
caches; check what needs more than one object (a tree's children's mins against their
parent's stays Usher's check, with its status condition and Event).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from fractions import Fraction
from functools import cache
from importlib import resources
from typing import Any

import yaml

from usher.core.model.errors import QuantityError
from usher.core.model.quantity import quantity_value
from usher.local.kube_emulator.resources import ResourceType
from usher.local.kube_emulator.validation import Cause, quantity_syntax_error
from usher.local.kube_emulator.wire import JsonObj

NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the "
    "existing errors to complete validation"
)
"""What kube-apiserver says instead of running CEL rules on an object of the wrong shape."""


# --------------------------------------------------------------------------- the CRD files


@cache
def crd_schemas() -> dict[tuple[str, str, str], JsonObj]:
    """(group, version, plural) -> the openAPIV3Schema of every shipped CRD version."""
    folder = resources.files("usher.local.kube_emulator") / "crds"
    out: dict[tuple[str, str, str], JsonObj] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        crd = yaml.safe_load(entry.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            key = (spec["group"], version["name"], spec["names"]["plural"])
            out[key] = version["schema"]["openAPIV3Schema"]
    return out


def schema_of(group: str, version: str, plural: str) -> JsonObj | None:
    return crd_schemas().get((group, version, plural))


# --------------------------------------------------------------------------- structure


def _type_of(value: object) -> str:
    """The OpenAPI type name of a JSON value, as the server's messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _shown(value: object) -> str:
    return value if isinstance(value, str) else _type_of(value)


def _fits(value: object, wanted: str) -> bool:
    actual = _type_of(value)
    return actual == wanted or (wanted == "number" and actual == "integer")


class _Walk:
    """One object's structural check: its causes, and whether one of them blocks the rules."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []
        self.blocking = False

    def add(self, reason: str, path: str, message: str, *, blocking: bool = False) -> None:
        self.causes.append((reason, path, message))
        self.blocking = self.blocking or blocking

    def check(self, schema: JsonObj, value: object, path: str) -> None:
        if value is None:
            return  # an absent or null field: required-ness is its parent's check
        if not self._typed(schema, value, path):
            return
        self._values(schema, value, path)
        if isinstance(value, dict):
            self._object(schema, value, path)
        elif isinstance(value, list):
            self._array(schema, value, path)

    def _typed(self, schema: JsonObj, value: object, path: str) -> bool:
        if schema.get("x-kubernetes-int-or-string"):
            wanted = ["integer", "string"]
        elif "type" in schema:
            wanted = [schema["type"]]
        else:
            return True
        if any(_fits(value, w) for w in wanted):
            return True
        actual = _type_of(value)
        message = f'{path} in body must be of type {",".join(wanted)}: "{actual}"'
        self.add(
            "FieldValueTypeInvalid", path, f'Invalid value: "{actual}": {message}', blocking=True
        )
        return False

    def _values(self, schema: JsonObj, value: object, path: str) -> None:
        shown = _shown(value)
        if "enum" in schema and value not in schema["enum"]:
            allowed = ", ".join(f'"{v}"' for v in schema["enum"])
            self.add(
                "FieldValueNotSupported",
                path,
                f'Unsupported value: "{shown}": supported values: {allowed}',
            )
        if isinstance(value, str):
            self._string(schema, value, path)
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._number(schema, value, path)
        bounds = (
            ("maxItems", list, "must have at most {} items"),
            ("maxProperties", dict, "must have at most {} properties"),
        )
        for key, kind, text in bounds:
            if key in schema and isinstance(value, kind) and len(value) > schema[key]:
                self.add(
                    "FieldValueTooMany",
                    path,
                    f"Too many: {len(value)}: " + text.format(schema[key]),
                )

    def _number(self, schema: JsonObj, value: float, path: str) -> None:
        for key, word in (("minimum", "greater"), ("maximum", "less")):
            bound = schema.get(key)
            if bound is None or (value >= bound if key == "minimum" else value <= bound):
                continue
            message = f"{path} in body should be {word} than or equal to {bound}"
            self.add("FieldValueInvalid", path, f"Invalid value: {value}: {message}")

    def _string(self, schema: JsonObj, value: str, path: str) -> None:
        if "minLength" in schema and len(value) < schema["minLength"]:
            message = f"{path} in body should be at least {schema['minLength']} chars long"
            self.add("FieldValueInvalid", path, f'Invalid value: "{value}": {message}')
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            message = f"may not be more than {schema['maxLength']} bytes"
            self.add("FieldValueTooLong", path, f"Too long: {message}")
        pattern = schema.get("pattern")
        if pattern and re.search(pattern, value) is None:
            message = f"{path} in body should match '{pattern}'"
            self.add("FieldValueInvalid", path, f'Invalid value: "{value}": {message}')

    def _object(self, schema: JsonObj, value: JsonObj, path: str) -> None:
        for field in schema.get("required", ()):
            if value.get(field) is None:
                self.add("FieldValueRequired", _join(path, field), "Required value", blocking=True)
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                self.check(properties[key], item, _join(path, key))
            elif isinstance(extra, dict):
                self.check(extra, item, _join(path, key))

    def _array(self, schema: JsonObj, value: list[Any], path: str) -> None:
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                self.check(items, item, f"{path}[{i}]")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def structural_causes(schema: JsonObj, obj: JsonObj) -> tuple[list[Cause], bool]:
    """What the schema refuses in ``obj`` (its spec and any typed top-level field), and
    whether the CEL rules may run (no wrong type or missing required field)."""
    walk = _Walk()
    properties = schema.get("properties") or {}
    for key in ("spec", "status"):
        if key in properties and key in obj:
            walk.check(properties[key], obj[key], key)
    return walk.causes, not walk.blocking


# --------------------------------------------------------------------------- CEL rules


def _amount(value: object) -> Fraction:
    if isinstance(value, dict) and "quantity" in value:
        value = value["quantity"]
    try:
        return quantity_value(value)
    except QuantityError as exc:
        raise ValueError(f"invalid quantity {value!r}: {exc}") from None


def _quantity(text: object) -> JsonObj:
    if quantity_syntax_error(text) is not None:
        raise ValueError(f"quantities must be Kubernetes notation, got {text!r}")
    return {"quantity": str(text)}


def _compare(left: object, right: object) -> int:
    a, b = _amount(left), _amount(right)
    return (a > b) - (a < b)


QUANTITY_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": lambda text: isinstance(text, str) and quantity_syntax_error(text) is None,
    "compareTo": _compare,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "sign": lambda q: _compare(q, {"quantity": "0"}),
}
"""The Kubernetes CEL quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go) as far
as Usher's rules use it: a quantity is carried as ``{"quantity": text}``."""


@cache
def _program(rule: str) -> Any:
    import cel  # the local stack's extra (usher[local]): only a rule being checked needs it

    return cel.compile(rule)


def _rules_at(schema: JsonObj, value: object, path: str) -> Iterator[tuple[JsonObj, object, str]]:
    """(rule, the value it is about, its path) of every rule reached by ``value``."""
    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations") or ():
        yield rule, value, path
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if isinstance(sub, dict):
                yield from _rules_at(sub, item, _join(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _rules_at(schema["items"], item, f"{path}[{i}]")


def _evaluate(rule: str, value: object) -> object:
    import cel

    context = cel.Context(variables={"self": value}, functions=QUANTITY_FUNCTIONS)
    return _program(rule).execute(context)


def rule_causes(schema: JsonObj, obj: JsonObj) -> list[Cause]:
    """Every failed ``x-kubernetes-validations`` rule of ``obj``, as kube-apiserver words it."""
    causes: list[Cause] = []
    properties = schema.get("properties") or {}
    for key in ("spec", "status"):
        if key not in properties or key not in obj:
            continue
        for rule, value, path in _rules_at(properties[key], obj[key], key):
            where = path + str(rule.get("fieldPath", ""))
            try:
                passed = _evaluate(rule["rule"], value) is True
            except (ValueError, TypeError, KeyError, RuntimeError) as exc:
                message = f"{exc} evaluating rule: {rule.get('message') or rule['rule']}"
                causes.append(
                    ("FieldValueInvalid", where, f'Invalid value: "{_type_of(value)}": {message}')
                )
                continue
            if not passed:
                message = rule.get("message") or f"failed rule: {rule['rule']}"
                reason = str(rule.get("reason") or "FieldValueInvalid")
                causes.append((reason, where, f'Invalid value: "{_type_of(value)}": {message}'))
    return causes


def schema_causes(schema: JsonObj, obj: JsonObj) -> list[Cause]:
    """Everything the API server refuses in ``obj`` by its CRD's schema and rules."""
    causes, rules_may_run = structural_causes(schema, obj)
    if rules_may_run:
        return causes + rule_causes(schema, obj)
    if any(schema_has_rules(schema)):
        causes.append(("FieldValueInvalid", "<nil>", f'Invalid value: "null": {NOT_CHECKED}'))
    return causes


def schema_has_rules(schema: object) -> Iterator[bool]:
    """Whether a schema (any node of it) carries CEL rules (one True per rule list found)."""
    if isinstance(schema, dict):
        if schema.get("x-kubernetes-validations"):
            yield True
        for value in schema.values():
            yield from schema_has_rules(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from schema_has_rules(value)


def crd_causes(rt: ResourceType, obj: JsonObj) -> list[Cause]:
    """What the CRD of ``rt`` (if Usher ships one) refuses in ``obj``."""
    schema = None if rt.builtin else schema_of(rt.group, rt.version, rt.plural)
    return [] if schema is None else schema_causes(schema, obj)
