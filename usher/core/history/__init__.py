"""The log as history: replay, the one fold, and what is read from it (audit, invariants,
the exact audit, simulation, what-if, planning, usage, estimates, explain, dry run).

One replayer (``replayer.replay_once``: the audit, the invariant checker, the usage fold and
the estimates on arrival observe one fold of the log) and one driver (``driver.Driver``:
apply -> decide -> next wakeup, for the simulator and what-if). It decides nothing itself:
every decision it shows comes from the engine.
"""
