"""``usher sim --generate SPEC``: read a generation spec, generate, play, report per department.

What it does: loads the spec (and the ``tree:`` file it names, relative to the spec), applies
the command line's knobs (``--seed``, ``--horizon``, ``--rate-scale``, ``--policy``), has
``usher.simgen.generate`` write the scenario, plays it with the core's simulator and prints
``usher.core.history.planning``'s report as a table, JSON or CSV; ``--emit`` also writes the
generated
scenario, which ``usher sim FILE`` then plays the same. A bad spec is refused naming each
field (exit 3).
What it must never do: draw random numbers outside its seeded generator, read a clock, or
print a traceback for a bad spec.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
import yaml

from usher.cli import EXIT_BAD_INPUT, fail, load_yaml_file, report_input_error
from usher.core.history import planning
from usher.core.history import sim as simulator
from usher.core.model.errors import InputError
from usher.simgen.generate import generate
from usher.simgen.spec import GenSpec, load_spec

Knobs = tuple[int | None, float | None, float | None, str | None]
"""``--seed``, ``--horizon``, ``--rate-scale``, ``--policy`` (None: the spec's)."""


def _tree_manifest(spec_file: Path, data: object) -> object | None:
    """The manifest a spec's ``tree:`` names (a path relative to the spec), if any."""
    if not isinstance(data, dict) or "tree" not in data:
        return None
    named = data["tree"]
    if not isinstance(named, str) or not named:
        fail(f"{spec_file}: tree: must be the path of an ElasticQuotaTree file", EXIT_BAD_INPUT)
    path = Path(named)
    manifest: object = load_yaml_file(path if path.is_absolute() else spec_file.parent / path)
    return manifest


def with_knobs(spec: GenSpec, knobs: Knobs) -> tuple[GenSpec, int]:
    """The spec with the command line's horizon, rate scale and policy, and the random seed."""
    seed, horizon, scale, policy = knobs
    if policy is not None:
        spec = dataclasses.replace(spec, config={**spec.config, "policy": policy})
    if horizon is not None:
        spec = dataclasses.replace(spec, horizon_s=horizon)
    if scale is not None:
        spec = dataclasses.replace(
            spec,
            departments=[
                dataclasses.replace(
                    d,
                    rate=d.rate * scale,
                    bursts=(
                        dataclasses.replace(d.bursts, jobs=round(d.bursts.jobs * scale))
                        if d.bursts is not None and round(d.bursts.jobs * scale) > 0
                        else None
                    ),
                )
                for d in spec.departments
            ],
        )
    return spec, spec.seed if seed is None else seed


def generate_and_report(spec_file: Path, knobs: Knobs, output: str, emit: Path | None) -> None:
    data = load_yaml_file(spec_file)
    source = str(spec_file)
    try:
        spec, seed = with_knobs(load_spec(data, source, _tree_manifest(spec_file, data)), knobs)
        scenario_data = generate(spec, seed)
        scenario = simulator.load_scenario(scenario_data, f"{source} (seed {seed})")
    except InputError as exc:
        report_input_error(source, exc)
        sys.exit(EXIT_BAD_INPUT)
    if emit is not None:
        text = yaml.safe_dump(scenario_data, sort_keys=False, width=100)
        try:
            emit.write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(f"--emit {emit}: cannot write ({exc.__class__.__name__})", EXIT_BAD_INPUT)
    result = simulator.run(scenario)
    report = planning.planning_report(simulator.planning_record(result))
    if output == "json":
        click.echo(planning.render_planning_json(report), nl=False)
    elif output == "csv":
        click.echo(planning.render_planning_csv(report), nl=False)
    else:
        click.echo(f"{spec.name}: seed {seed}, {len(scenario.steps)} jobs")
        click.echo(planning.render_planning_table(report), nl=False)
