"""Label and field selectors of the Kubernetes API emulator: what a list or watch asks for.

What it does: parses ``labelSelector`` (equality, inequality, in/notin, exists, !exists) and
``fieldSelector`` (``metadata.name``, ``metadata.namespace`` and a few per resource type) like
the real server, refusing what it refuses, and matches objects against them (``Filter``: a
namespace and both selectors).
What it must never do: change an object, keep state or do I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from usher.local.kube_emulator.errors import bad_request
from usher.local.kube_emulator.resources import ResourceType
from usher.local.kube_emulator.wire import JsonObj

_LABEL_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_RE_EXISTS = re.compile(rf"^(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})$")
_RE_EQUALITY = re.compile(rf"^(?P<key>{_LABEL_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_LABEL_VALUE})$")
_RE_SET = re.compile(rf"^(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key op values``."""

    key: str
    op: Literal["=", "!=", "in", "notin", "exists", "!exists"]
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # != and notin match absent keys


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )`` (set-based values contain commas)."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_requirement(clause: str) -> Requirement:
    if m := _RE_SET.match(clause):
        values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
        op: Literal["in", "notin"] = "in" if m["op"] == "in" else "notin"
        return Requirement(m["key"], op, values)
    if m := _RE_EQUALITY.match(clause):
        eq: Literal["=", "!="] = "!=" if m["op"] == "!=" else "="
        return Requirement(m["key"], eq, frozenset({m["value"]}))
    if m := _RE_EXISTS.match(clause):
        return Requirement(m["key"], "!exists" if m["neg"] else "exists")
    raise bad_request(f"unable to parse requirement: {clause!r}")


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector`` (equality, inequality, in/notin, exists, !exists)."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        return cls(tuple(parse_requirement(c) for c in _split_top_level(text)))

    def matches(self, obj: JsonObj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


def _field_value(obj: JsonObj, path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector``: ``metadata.name``/``metadata.namespace`` (+ a few per kind)."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(cls, text: str, rt: ResourceType) -> FieldSelector:
        supported = ("metadata.name", "metadata.namespace", *rt.extra_fields)
        terms: list[tuple[str, bool, str]] = []
        for clause in _split_top_level(text):
            m = re.match(r"^([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*)$", clause)
            if m is None:
                raise bad_request(f"invalid selector: '{text}'; can't understand '{clause}'")
            if m[1] not in supported:
                raise bad_request(f'field label not supported: "{m[1]}"')
            terms.append((m[1], m[2] != "!=", m[3].strip()))
        return cls(tuple(terms))

    def matches(self, obj: JsonObj) -> bool:
        return all((_field_value(obj, f) == v) == eq for f, eq, v in self.terms)


@dataclass(frozen=True)
class Filter:
    """What one list or watch asks for: a namespace (or all) and label/field selectors."""

    namespace: str | None = None
    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)

    def matches(self, obj: JsonObj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        return self.labels.matches(obj) and self.fields.matches(obj)
