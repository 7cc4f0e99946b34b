"""How long the client waits for what it reads on the log: the constants commands show.

A module of its own so that the CLI can show a default (``usher wait --grace``) without
importing the client, NATS and the core. What it must never do: import anything.
"""

REASON_EVERY_S = 1.0
"""A waiting job's reason is recomputed (a trial pass on a copy) at most this often."""

UNKNOWN_GRACE_S = 5.0
"""How long ``wait`` waits for a job Usher has not seen yet (one just created) before it says
the job is unknown."""
