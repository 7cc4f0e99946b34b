"""The admission webhook: managed jobs are created suspended, so only the ledger starts them.

What it does: see ``service`` (HTTPS server) and ``mutate`` (the pure decision and patch).
What it must never do: talk to NATS or the ledger, or admit anything.
"""
