"""The ledger service: the one arbiter of quota, in PostgreSQL (DESIGN principle 4).

What it does: answers reservation and preemption requests (``<p>.ledger.reserve``,
``<p>.ledger.preempt``) in coalesced transactions, follows the cluster events of the log to
release allocations (offset stored with the rows), and publishes its decisions (``Admitted``,
``Preempted``, ``Released``) from the transactional outbox.
What it must never do: decide outside a store transaction, publish a decision that was not
committed, or die on one bad message (it is parked on ``<p>.dlq.ledger``).
"""
