"""Generated simulation for planning (S2, ``usher sim --generate``): a spec, a seed, a scenario.

What it does: ``spec`` checks a generation spec, ``generate`` draws the jobs it describes
from a seeded ``random.Random`` and writes them as an ordinary scenario, which the core's
simulator (``usher.core.history.sim``) plays and ``usher.core.history.planning`` reports on per
department.
What it must never do: decide admission, read a clock, or draw from a global random state:
the only randomness is here, outside the pure core, and it is seeded.
"""
