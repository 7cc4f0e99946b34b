"""What the real API server refuses in a built-in object before it is stored.

What it does: ``check_decodable`` refuses, as a 400 ``BadRequest``, what kube-apiserver cannot
even decode into its Go type: a resource quantity that is not Kubernetes notation
(``cpu: 1x``), worded as apimachinery's ``resource.ParseQuantity`` errors
(``quantities must match the regular expression ...``, ``unable to parse quantity's suffix``).
``field_problems`` lists what the registry's validation refuses as a 422 ``Invalid``, with
the real field paths and messages: label keys and values (``metadata.labels``, a pod
template's labels), a pod spec without containers or a container without a name, negative
quantities and requests above limits. Messages are those of k8s.io/apimachinery's
``validation.IsQualifiedName``/``IsValidLabelValue`` and k8s.io/kubernetes'
``pkg/apis/core/validation`` (quoted in the conformance test with where each comes from).
Parsed quantities are remembered (a pure function of the text: the same few values come back
in every job).
What it must never do: hold state (but that memo), do I/O, or refuse anything the real server
accepts (a check not listed here is not made: the emulator is lenient where it does not know).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from usher.core.model.errors import QuantityError
from usher.core.model.quantity import quantity_value
from usher.local.kube_emulator.errors import bad_request
from usher.local.kube_emulator.resources import ResourceType
from usher.local.kube_emulator.wire import JsonObj

Cause = tuple[str, str, str]
"""(reason, field, message) of one refused field, as ``errors.invalid`` takes them."""

QUANTITY_SPLIT = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
"""apimachinery's ``splitREString``: what ``ParseQuantity`` first matches a quantity with."""
_SPLIT = re.compile(QUANTITY_SPLIT)
_NUMBER = re.compile(r"^[0-9]*\.?[0-9]*$")
_SUFFIX = re.compile(r"^(|[KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]+)$")
FORMAT_WRONG = f"quantities must match the regular expression '{QUANTITY_SPLIT}'"
NUMERIC_WRONG = "unable to parse numeric part of quantity"
SUFFIX_WRONG = "unable to parse quantity's suffix"

LABEL_VALUE_RE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
NAME_PART_RE = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
SUBDOMAIN_RE = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{LABEL_VALUE_RE}')"
)
NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    f"used for validation is '{NAME_PART_RE}')"
)
PREFIX_MESSAGE = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
    f"'example.com', regex used for validation is '{SUBDOMAIN_RE}')"
)


# --------------------------------------------------------------------------- quantities


def quantity_syntax_error(value: object) -> str | None:
    """Why ``ParseQuantity`` refuses ``value`` (None: it parses). JSON numbers always do."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return None
    text = str(value)
    split = _SPLIT.match(text)
    if split is None:
        return FORMAT_WRONG
    number, suffix = split.groups()
    if not _NUMBER.match(number.lstrip("+-")) or not any(c.isdigit() for c in number):
        return NUMERIC_WRONG
    if not _SUFFIX.match(suffix):
        return SUFFIX_WRONG
    return None


def _resource_lists(rt: ResourceType, obj: JsonObj) -> Iterator[tuple[str, Any]]:
    """(field path, resource list) of every quantity map of a built-in object we serve."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    if rt.kind == "Pod":
        yield from _pod_resource_lists("spec", spec)
    elif rt.kind == "Job":
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            yield from _pod_resource_lists("spec.template.spec", template["spec"])
    elif rt.kind == "LimitRange":
        for i, limit in _items(spec.get("limits")):
            for key in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                yield f"spec.limits[{i}].{key}", limit.get(key)
    elif rt.kind == "Node":
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        assert isinstance(status, dict)
        for key in ("capacity", "allocatable"):
            yield f"status.{key}", status.get(key)


def _pod_resource_lists(path: str, pod: JsonObj) -> Iterator[tuple[str, Any]]:
    for group in ("initContainers", "containers"):
        for i, ctr in _items(pod.get(group)):
            resources = ctr.get("resources")
            if isinstance(resources, dict):
                for key in ("limits", "requests"):
                    yield f"{path}.{group}[{i}].resources.{key}", resources.get(key)
    yield f"{path}.overhead", pod.get("overhead")


def _items(value: object) -> Iterator[tuple[int, JsonObj]]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                yield i, item


def check_decodable(rt: ResourceType, obj: JsonObj) -> None:
    """400, as the real server's decoding, for a quantity that is not Kubernetes notation."""
    if not rt.builtin:
        return
    for _, values in _resource_lists(rt, obj):
        for value in (values or {}).values() if isinstance(values, dict) else ():
            why = quantity_syntax_error(value)
            if why is not None:
                version = rt.api_version.rsplit("/", 1)[-1]
                raise bad_request(
                    f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {why}'
                )


def _amount(value: object) -> Fraction | None:
    if isinstance(value, str):
        return _parsed_amount(value)
    try:
        return quantity_value(value)
    except QuantityError:
        return None


@functools.lru_cache(maxsize=4096)
def _parsed_amount(text: str) -> Fraction | None:
    try:
        return quantity_value(text)
    except QuantityError:
        return None


def _quantity_causes(rt: ResourceType, obj: JsonObj) -> Iterator[Cause]:
    lists = dict(_resource_lists(rt, obj))
    for path, values in lists.items():
        for name, value in (values or {}).items() if isinstance(values, dict) else ():
            amount = _amount(value)
            if amount is not None and amount < 0:
                yield (
                    "FieldValueInvalid",
                    f"{path}[{name}]",
                    f'Invalid value: "{value}": must be greater than or equal to 0',
                )
        if path.endswith(".requests"):
            limits = lists.get(path.removesuffix("requests") + "limits")
            yield from _requests_within_limits(path, values, limits)


def _requests_within_limits(path: str, requests: object, limits: object) -> Iterator[Cause]:
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        return
    for name, value in requests.items():
        asked, bound = _amount(value), _amount(limits.get(name))
        if asked is not None and bound is not None and name in limits and asked > bound:
            yield (
                "FieldValueInvalid",
                path,
                f'Invalid value: "{value}": must be less than or equal to {name} limit of '
                f"{limits[name]}",
            )


# --------------------------------------------------------------------------- labels


def _qualified_name_problems(key: str) -> list[str]:
    """apimachinery's ``IsQualifiedName``: ``[prefix/]name``."""
    prefix, _, name = key.rpartition("/")
    problems: list[str] = []
    if key.count("/") > 1:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',"
            "  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
            "and '/' (e.g. 'example.com/MyName')"
        ]
    if "/" in key:
        if not prefix:
            problems.append("prefix part must be non-empty")
        elif len(prefix) > SUBDOMAIN_MAX:
            problems.append(f"prefix part must be no more than {SUBDOMAIN_MAX} characters")
        elif not re.fullmatch(SUBDOMAIN_RE, prefix):
            problems.append(PREFIX_MESSAGE)
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > LABEL_MAX:
        problems.append(f"name part must be no more than {LABEL_MAX} characters")
    elif not re.fullmatch(NAME_PART_RE, name):
        problems.append(NAME_PART_MESSAGE)
    return problems


def label_causes(path: str, labels: object) -> Iterator[Cause]:
    """``ValidateLabels``: each key a qualified name, each value a label value."""
    if not isinstance(labels, dict):
        return
    for key, value in sorted(labels.items()):
        for problem in _qualified_name_problems(str(key)):
            yield ("FieldValueInvalid", path, f'Invalid value: "{key}": {problem}')
        text = value if isinstance(value, str) else ""
        if len(text) > LABEL_MAX:
            message = f"must be no more than {LABEL_MAX} characters"
            yield ("FieldValueInvalid", path, f'Invalid value: "{text}": {message}')
        elif not re.fullmatch(LABEL_VALUE_RE, text):
            yield ("FieldValueInvalid", path, f'Invalid value: "{text}": {LABEL_VALUE_MESSAGE}')


# --------------------------------------------------------------------------- pod specs


def _pod_spec(rt: ResourceType, obj: JsonObj) -> tuple[str, JsonObj] | None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    if rt.kind == "Pod":
        return "spec", spec
    template = spec.get("template")
    if rt.kind == "Job" and isinstance(template, dict):
        pod = template.get("spec")
        return "spec.template.spec", pod if isinstance(pod, dict) else {}
    return None


def _container_causes(path: str, pod: JsonObj) -> Iterator[Cause]:
    containers = pod.get("containers")
    if not containers:
        yield ("FieldValueRequired", f"{path}.containers", "Required value")
    for group in ("initContainers", "containers"):
        for i, ctr in _items(pod.get(group)):
            if not ctr.get("name"):
                yield ("FieldValueRequired", f"{path}.{group}[{i}].name", "Required value")


def field_problems(rt: ResourceType, obj: JsonObj) -> list[Cause]:
    """Every 422 cause of ``obj``, in the order the real server lists them (metadata first)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    causes = list(label_causes("metadata.labels", meta.get("labels")))
    if not rt.builtin:
        return causes
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if rt.kind == "Job" and isinstance(template, dict):
        template_meta = template.get("metadata")
        if isinstance(template_meta, dict):
            causes += label_causes("spec.template.labels", template_meta.get("labels"))
    pod = _pod_spec(rt, obj)
    if pod is not None:
        causes += _container_causes(*pod)
    causes += _quantity_causes(rt, obj)
    return causes


def _checked_parts(rt: ResourceType, obj: JsonObj) -> tuple[object, ...]:
    """All that ``check_decodable`` and ``field_problems`` read of ``obj``: its labels, its
    spec, and a Node's status (capacity and allocatable)."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    status = obj.get("status") if rt.kind == "Node" else None
    return labels, obj.get("spec"), status


def same_checked_parts(rt: ResourceType, new: JsonObj, stored: JsonObj) -> bool:
    """Whether ``new`` is what ``stored`` was in all these checks read (a status write of a
    Job or a Pod, an annotation): they would find what they found when ``stored`` was
    written, so the store need not run them again (a real server validates only what a
    status write changes)."""
    return _checked_parts(rt, new) == _checked_parts(rt, stored)
