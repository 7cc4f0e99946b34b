"""The decision engine: its state, the facade that folds events and runs passes, the pass
itself, reclaim search, queries, snapshots.

Nothing outside this package reads the engine's private members.
"""
