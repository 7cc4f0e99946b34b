"""Rule books the engine and the ledger share: arbitration, reclaim conditions, readiness,
holds, retries, budgets and fair share, each a pure function of the values it is given.

No rule here reads the engine; the engine and the ledger call them.
"""
