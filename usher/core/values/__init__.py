"""Values at Usher's boundaries, parsed strictly and once (docs/reference/annotations.md).

What it does: one parser per kind of value a person writes -- counts and whole seconds
(``numbers``), exact decimals and durations (``numbers``), Kubernetes quantities
(``quantities``, over ``usher.core.model.quantity``), zone and object names (``names``), booleans,
enums and bounded free text (``text``) -- each with bounds its caller states, raising
``ValueRefused`` that names the field; ``registry`` lists every ``usher.io/`` tree attribute
and job annotation Usher reads with its parser, and ``render`` writes that list as the reference
page's text. The tree's validation, the engine's readers, the job translation, the CLI and the
client all go through these.
What it must never do: accept non-ASCII digits, surrounding spaces, non-finite or unbounded
numbers, convert a long digit string before capping its length, or do I/O.
"""
