"""Hostile values for every ``usher.io/`` setting: a fixed corpus and hypothesis strategies.

What it does: ``CORPUS`` lists values a tenant or an operator could write that Usher must
refuse -- huge digit strings (100,000 digits, 2**64, 20 nines), negative, fullwidth,
Arabic-Indic and superscript digits, surrounding spaces, nan/inf/1e300, empty, a 100 KB string,
control characters, malformed priority thresholds (``LowerPriority:2147483648``), and YAML
values of the wrong type -- each with the kinds of setting for
which it is nevertheless a good value (``"nan"`` is a fine zone name, ``" 5 "`` a fine hold
reason). ``bad_values(kind)`` and ``hostile_values(kind)`` give what a setting of that kind
must refuse; tests of the core, the watcher and the stack reuse them. ``hostile_trees`` and
``hostile_jobs`` are typed log entries built from them, for tests that bypass the watcher.
What it must never do: assert, start a server, or give a value that is good for the kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from hypothesis import strategies as st

from schemas import Millis, PodSet, QuotaNode, WorkloadKey, WorkloadObserved, Zone
from tests.builders.log import BASE_MS, CPU
from tests.builders.trees import departments_tree
from usher.core.values.registry import SETTINGS

TEXT_KINDS = frozenset({"text"})
"""Kinds that take any printable text of bounded length."""
ZONE_KINDS = frozenset({"zone-names"})
GATE_KINDS = frozenset({"gate-names"})
"""Lists of admission gates' names (G1): words like zone names; empty lists none."""
NAME_KINDS = ZONE_KINDS | GATE_KINDS
LABEL_KINDS = frozenset({"group-name"})
"""One DNS-1123 label (a fan-out's group name): a word, never a space or an empty string."""
DECIMAL_KINDS = frozenset({"factor", "duration", "quantity"})
"""Kinds that take a fraction (``1.5``)."""


@dataclass(frozen=True)
class Hostile:
    """One hostile value, and the kinds of setting for which it is a good value after all."""

    label: str
    value: object
    good_for: frozenset[str] = frozenset()

    def bad_for(self, kind: str) -> bool:
        return kind not in self.good_for


_ANY_WORD = TEXT_KINDS | NAME_KINDS | LABEL_KINDS

CORPUS: tuple[Hostile, ...] = (
    Hostile("100000-digits", "9" * 100_000),
    Hostile("2**64", str(2**64), _ANY_WORD),
    Hostile("20-nines", "9" * 20, _ANY_WORD),
    Hostile("int64-overflow", "99999999999999999999999", _ANY_WORD),
    Hostile("negative", "-1", TEXT_KINDS),
    Hostile("fullwidth", "\uff11\uff12", TEXT_KINDS),
    Hostile("arabic-indic", "\u0661", TEXT_KINDS),
    Hostile("superscript", "\u00b2", TEXT_KINDS),
    Hostile("spaces", " 5 ", TEXT_KINDS | NAME_KINDS),  # a list's spaces around names are allowed
    Hostile("nan", "nan", _ANY_WORD),
    Hostile("NaN", "NaN", TEXT_KINDS),
    Hostile("inf", "inf", _ANY_WORD),
    Hostile("-inf", "-inf", TEXT_KINDS),
    Hostile("1e300", "1e300", _ANY_WORD),
    Hostile("fraction", "1.5", TEXT_KINDS | DECIMAL_KINDS),
    Hostile("empty", "", TEXT_KINDS | GATE_KINDS),  # no gate is left
    Hostile("100KB", "a" * 100_000),
    Hostile("nul", "5\x00"),
    Hostile("newline", "5\n"),
    Hostile("escape", "\x1b[31m"),
    Hostile("script", "<script>", TEXT_KINDS),
    # A priority threshold (usher.io/preempt-while-borrowing, P2) must be an int32 in ASCII.
    Hostile("threshold-overflow", "LowerPriority:2147483648", TEXT_KINDS),
    Hostile("threshold-huge", "LowerPriority:" + "9" * 100_000),
    Hostile("threshold-spaces", "LowerPriority: 5", TEXT_KINDS),
    Hostile("threshold-fullwidth", "LowerPriority:\uff15", TEXT_KINDS),
    Hostile("threshold-empty", "LowerPriority:", TEXT_KINDS),
    Hostile("threshold-double-sign", "LowerPriority:--5", TEXT_KINDS),
    Hostile("policy-case", "lowerpriority", _ANY_WORD),
    Hostile("int", 5),
    Hostile("float", 1.5),
    Hostile("bool", True),
    Hostile("list", ["5"]),
    Hostile("mapping", {"a": "5"}),
)
"""Every fixed hostile value; ``good_for`` names the kinds that accept it."""

STRING_CORPUS: tuple[Hostile, ...] = tuple(h for h in CORPUS if isinstance(h.value, str))
"""The corpus values a ``map[string]string`` (a typed tree's attributes) can hold."""


AMOUNT_CORPUS: tuple[Hostile, ...] = (
    Hostile("amount-negative", "cpu=-1"),
    Hostile("amount-huge", "cpu=99999999999999999999999"),
    Hostile("amount-nan", "cpu=nan"),
    Hostile("amount-twice", "cpu=1, cpu=2"),
    Hostile("amount-no-resource", "=4"),
    Hostile("amount-no-quantity", "cpu"),
    Hostile("amount-bad-resource", "c p u=4"),
    Hostile("amount-fullwidth", "cpu=\uff11"),
)
"""Lists of amounts per resource (``usher.io/lending-limit``) that look almost right."""
KIND_CORPUS: dict[str, tuple[Hostile, ...]] = {"resource-amounts": AMOUNT_CORPUS}
"""Hostile values only one kind must refuse (other kinds may take them as text)."""


def bad_values(kind: str, *, strings_only: bool = False) -> list[Hostile]:
    """The corpus values a setting of ``kind`` must refuse."""
    corpus = (STRING_CORPUS if strings_only else CORPUS) + KIND_CORPUS.get(kind, ())
    return [hostile for hostile in corpus if hostile.bad_for(kind)]


def _huge_digits() -> st.SearchStrategy[str]:
    return st.integers(min_value=10**21, max_value=10**4000).map(str)


def _non_ascii_digits() -> st.SearchStrategy[str]:
    digits = st.characters(categories=["Nd", "No"], exclude_characters="0123456789")
    return st.text(digits, min_size=1, max_size=6)


def _with_control() -> st.SearchStrategy[str]:
    controls = st.characters(categories=["Cc"])
    return st.tuples(st.text(max_size=4), controls, st.text(max_size=4)).map("".join)


def hostile_values(kind: str, *, strings_only: bool = False) -> st.SearchStrategy[object]:
    """Values a setting of ``kind`` must refuse: the corpus, and generated ones."""
    fixed = st.sampled_from([h.value for h in bad_values(kind, strings_only=strings_only)])
    generated: list[st.SearchStrategy[object]] = [_with_control()]
    if kind not in TEXT_KINDS:
        generated.append(_non_ascii_digits())
    if kind not in TEXT_KINDS | NAME_KINDS | LABEL_KINDS:
        generated.append(_huge_digits())
    return st.one_of(fixed, *generated)


# ------------------------------------------------------------------ typed entries for the log


def hostile_trees(values_per_setting: int | None = None) -> list[QuotaNode]:
    """Typed trees a forger could put straight on the log (bypassing the watcher): the
    departments tree with one tree attribute of the registry set to each corpus value that
    its kind refuses (the first ``values_per_setting`` of them, or all), then a 100 KB node name
    and amounts beyond any bound."""
    tree = departments_tree()
    out: list[QuotaNode] = []
    for entry in SETTINGS:
        if entry.scope == "job":
            continue
        refused = [h.value for h in bad_values(entry.kind, strings_only=True)]
        for value in refused[:values_per_setting]:
            assert isinstance(value, str)
            out.append(msgspec.structs.replace(tree, attributes={entry.key: value}))
    out.append(msgspec.structs.replace(tree, name="x" * 100_000))
    out.append(msgspec.structs.replace(tree, max={"cpu": 2**70}, min={"cpu": -(2**70)}))
    return out


def hostile_jobs() -> list[WorkloadObserved]:
    """Typed job observations no manifest could give: 100 KB names and zones, control
    characters, amounts and counts beyond any bound, negative ones."""

    def job(
        name: str = "h", zone: str = "default", cpu: int = CPU, count: int = 1
    ) -> WorkloadObserved:
        return WorkloadObserved(
            workload=WorkloadKey(f"user-a/{name}"), namespace="user-a", name=name,
            kind="batch/v1/Job", zone=Zone(zone), zones=[Zone(zone)], priority=0,
            created_ms=Millis(BASE_MS), suspended=True,
            pod_sets=[PodSet(name="main", count=count, requests={"cpu": cpu})],
        )  # fmt: skip

    return [
        job(name="n" * 100_000), job(zone="z" * 100_000), job(zone="\x00\n\t"), job(zone=""),
        job(cpu=2**70), job(cpu=-(2**70)), job(count=2**62), job(count=-5), job(cpu=-1),
    ]  # fmt: skip
