"""The log as history: replay, the one fold, and what is read from it (audit, invariants,
the exact audit, simulation, what-if, planning, usage, estimates, explain, dry run).

It decides nothing itself: every decision it shows comes from the engine.
"""
