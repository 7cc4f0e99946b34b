"""The decision core's state as data: the indexed quota tree, workloads and queues it folds
into (``indexed``), and exactly what a snapshot stores of it (``durable``).

It decides nothing: the engine changes it, gates and readers only read it.
"""
