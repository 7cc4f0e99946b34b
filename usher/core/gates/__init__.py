"""The admission gates: may a waiting workload be offered now, and if not, why and until when.

What it holds: one module per gate (``readiness`` R10, ``stopping`` R7, ``zone`` Z2, ``cluster`` M1,
``holds`` R14/R15, ``budget`` B1, ``overrun`` B2, ``admission`` G1), the shapes they share
(``view``: the read-only view a gate reads, ``Gate``, ``Refusal``) and ``chain``: the ordered
list of gates
and the functions every place that asks the question calls -- the decision pass, the leaves'
kept offers, the starvation guard (N1, N2), Block's head, pruning, the reason cascade, the
reclaim preview, the dry run and the start estimate.
What it must never do: import the engine or read its private members (a gate reads only an
``AdmissionView``), change the state, read a clock, or decide anything beyond "not now".
"""
