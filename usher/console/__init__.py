"""The web console: a read-only view of one installation's log in the browser (issue 21).

What it does: ``usher console`` (and ``usher up``, which starts it as a process of its own)
follows the log with the read-only ``console`` NATS identity and serves, on 127.0.0.1 by
default, server-rendered pages over the projections the command line already has: the quota
tree (``usher.client.state``), every queue in order, a job's story (``usher.core.history.explain``),
the decision stream live (server-sent events), charts of queues and wait times, and a time
travel view at any past log position (``usher.core.history.replay.replay``, as ``usher replay``).
``feed`` folds the log; ``pages`` shapes what the templates show; ``server`` is the aiohttp
application. It sits beside ``usher.demo``: above the client, below the command line.
What it must never do: write anything (no publish, no acknowledgement, no form that changes
state), show a secret (URLs with passwords), or decide anything itself.
"""
