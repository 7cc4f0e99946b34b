"""Adapters: the I/O edges of Usher (NATS, PostgreSQL, Kubernetes, embedded servers)."""
