"""Adapters: the I/O edges of Usher (NATS, PostgreSQL, Kubernetes, ``stack.json``'s reader)."""
