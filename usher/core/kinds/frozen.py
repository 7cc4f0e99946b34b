"""Which fields of a job may not change while it runs (R16), for every kind of the registry.

What it does: ``frozen_changes(family, old_spec, new_spec)`` names every field of a job's
``spec`` whose change would alter what its admission counted: anything under a pod set's
template (``PodSetSource.template_path``: a pod template, a Spark driver or executor, Argo's
templates) or replacing a whole subtree that holds one, and any field outside them whose
change alone alters the pod sets' names or pod counts (``parallelism``, ``completions``,
``replicas`` of every kind, Ray's ``numOfHosts``, Spark's executor ``instances``, Argo's
``parallelism``...). The kind's own ``pod_sets`` reader decides what counts, so a kind added
to the registry is covered with no line here. Kueue refuses the same edits of a job that is
not suspended (its job webhooks' ``ValidateUpdate``). The webhook refuses them on UPDATE;
``grew`` says whether an observed size exceeds what was admitted (what the engine suspends
where no webhook runs).
What it must never do: do I/O, mutate a spec it was given, or call a change free that alters
a pod set's count, requests or template.
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas import FieldError, Resources
from usher.core.kinds.family import KindFamily
from usher.core.kinds.fields import Raw, error

FROZEN_CODE = "frozen-while-running"
"""The error code of a change to a frozen field (R16)."""
MOST_REPORTED = 20
"""Changed fields named at most; a longer list ends with the count of the rest."""
_MOST_BLAMED = 64
"""Changed fields outside the templates tried one by one at most (bounds the work a hostile
update can cause); past it a changed pod count is reported on ``spec``."""

Step = str | int
Path = tuple[Step, ...]
Shape = tuple[tuple[str, int], ...]


def frozen_changes(family: KindFamily, old_spec: object, new_spec: object) -> list[FieldError]:
    """Every change from ``old_spec`` to ``new_spec`` a running job may not make, each
    naming its field (``spec.template.spec.containers[0].resources.requests.cpu``)."""
    old = old_spec if isinstance(old_spec, Mapping) else {}
    new = new_spec if isinstance(new_spec, Mapping) else {}
    changed = list(_differences(old, new, ("spec",)))
    if not changed:
        return []
    templates = _template_paths(family, old) | _template_paths(family, new)
    frozen: list[Path] = []
    outside: list[Path] = []
    for path in changed:
        (frozen if _touches_template(_render(path), templates) else outside).append(path)
    before, after = _shape(family, old), _shape(family, new)
    if before != after:
        blamed = [p for p in outside[:_MOST_BLAMED] if _shape_without(family, old, new, p) != after]
        if not blamed and not frozen:
            blamed = [("spec",)]  # no one change alone did it (or too many to try)
        frozen.extend(blamed)
    problems = [_problem(family, path, before, after) for path in sorted(frozen, key=_render)]
    if len(problems) > MOST_REPORTED:
        rest = len(problems) - MOST_REPORTED
        extra = error("spec", FROZEN_CODE, f"and {rest} more changed fields that are immutable")
        problems = [*problems[:MOST_REPORTED], extra]
    return problems


def grew(admitted: Resources, observed: Resources) -> list[str]:
    """The resources ``observed`` asks more of than ``admitted`` counted, sorted."""
    return sorted(r for r, amount in observed.items() if amount > admitted.get(r, 0))


def _problem(family: KindFamily, path: Path, before: Shape, after: Shape) -> FieldError:
    message = f"field is immutable while the {family.kind} is not suspended"
    if before != after:
        message += f" (pods {_pods(before)} -> {_pods(after)})"
    message += "; suspend it first, or create a new job"
    return error(_render(path), FROZEN_CODE, message)


def _pods(shape: Shape) -> str:
    return ", ".join(f"{name}: {count}" for name, count in shape) or "none"


def _shape(family: KindFamily, spec: Raw) -> Shape:
    """Each pod set's name and pod count, as the kind's reader counts them."""
    return tuple((source.name, source.count) for source in family.pod_sets(spec, []))


def _shape_without(family: KindFamily, old: Raw, new: Raw, path: Path) -> Shape:
    """The pod sets of ``new`` with the change at ``path`` undone."""
    return _shape(family, _replaced(new, path[1:], _at(old, path[1:])))


def _template_paths(family: KindFamily, spec: Raw) -> set[str]:
    return {source.template_path for source in family.pod_sets(spec, [])}


def _touches_template(path: str, templates: set[str]) -> bool:
    """Under a pod set's template, or replacing a whole subtree that holds one."""
    return any(_within(path, t) or _within(t, path) for t in templates)


def _within(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith((f"{ancestor}.", f"{ancestor}["))


_ABSENT = object()


def _differences(old: object, new: object, path: Path) -> list[Path]:
    """The paths of the leaves (or whole lists of another length) that differ."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        found: list[Path] = []
        for key in sorted({*old, *new}, key=str):
            found.extend(_differences(old.get(key, _ABSENT), new.get(key, _ABSENT), (*path, key)))
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            found.extend(_differences(a, b, (*path, index)))
        return found
    return [] if _same(old, new) else [path]


def _same(old: object, new: object) -> bool:
    # ``True == 1`` in Python: a bool turned into a number is a change.
    return type(old) is type(new) and old == new


def _at(root: object, path: Path) -> object:
    node = root
    for step in path:
        if isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
            continue
        if not (isinstance(node, Mapping) and isinstance(step, str) and step in node):
            return _ABSENT
        node = node[step]
    return node


def _replaced(root: Raw, path: Path, value: object) -> Raw:
    """A copy of ``root`` with ``value`` at ``path`` (removed when absent), sharing the rest."""
    result = _replace(root, path, value)
    return result if isinstance(result, Mapping) else {}


def _replace(node: object, path: Path, value: object) -> object:
    if not path:
        return value
    step, rest = path[0], path[1:]
    if isinstance(step, str) and isinstance(node, Mapping):
        copied = dict(node)
        child = _replace(copied.get(step, _ABSENT), rest, value)
        if child is _ABSENT:
            copied.pop(step, None)
        else:
            copied[step] = child
        return copied
    if isinstance(step, int) and isinstance(node, list) and step < len(node):
        items = list(node)
        items[step] = _replace(items[step], rest, value)
        return items
    return node


def _render(path: Path) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text
