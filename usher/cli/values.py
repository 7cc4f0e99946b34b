"""Click parameter types over the core's value parsers: a CLI option is read as strictly as an
annotation (``usher.core.values``).

What it does: ``QUANTITY_CPU``/``QUANTITY_MEMORY``/``QUANTITY_GPU`` (a quantity, kept as written
for the manifest), ``REPLICAS`` (a count), ``ZONE`` (a zone name) and ``DURATION`` (seconds, up
to 30 days) refuse fullwidth digits, ``inf``, ``nan``, ``1e300``, ``" 5 "`` at parse time, one
line naming the option, before anything is asked of the stack.
What it must never do: parse a value itself (the core's parser does), or print a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import click

from usher.core.model.errors import ValueRefused
from usher.core.values import fanout, names, numbers, quantities


class CoreValue(click.ParamType[Any]):
    """One option read by a core parser ``parse(raw, path)``; ``keep_text`` gives the text
    (checked) instead of the parsed value, ``convert_to`` converts the parsed value."""

    def __init__(
        self,
        name: str,
        parse: Callable[[object, str], Any],
        *,
        keep_text: bool = False,
        convert_to: Callable[[Any], Any] | None = None,
    ) -> None:
        self.name = name
        self._parse = parse
        self._keep_text = keep_text
        self._convert_to = convert_to

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default, already of the right type
        option = param.opts[0] if param is not None and param.opts else "value"
        try:
            parsed = self._parse(value, option)
        except ValueRefused as refused:
            self.fail(refused.message.removeprefix(f"{option}: "), param, ctx)
        if self._keep_text:
            return value
        return self._convert_to(parsed) if self._convert_to is not None else parsed


def _quantity(resource: str) -> CoreValue:
    return CoreValue("quantity", partial(quantities.quantity, resource=resource), keep_text=True)


QUANTITY_CPU = _quantity("cpu")
QUANTITY_MEMORY = _quantity("memory")
QUANTITY_GPU = _quantity("nvidia.com/gpu")
REPLICAS = CoreValue("count", partial(numbers.count, low=1, high=numbers.MAX_COUNT))
ZONE = CoreValue("zone", names.zone_name)
GROUP = CoreValue("group", fanout.group)
"""A fan-out group's name (``usher jobs/wait/delete --group``): a DNS-1123 label."""
DURATION = CoreValue("seconds", numbers.duration, convert_to=float)
HALF_LIFE = CoreValue(
    "seconds", partial(numbers.duration, high=numbers.MAX_HALF_LIFE_SECONDS), convert_to=float
)
"""Fair share's half-life (F1): a duration of up to a year (more than 0: the settings say)."""
SEQUENCE = CoreValue("seq", partial(numbers.whole, low=0, high=numbers.MAX_SEQUENCE))
"""A log sequence number: ASCII digits, 0 to 2**63 - 1 (what JetStream can number)."""
"""Seconds a job runs, a command waits or a what-if setting lasts: 0 to 30 days, at most 3
decimals."""
