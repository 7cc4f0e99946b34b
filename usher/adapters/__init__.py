"""Adapters: the I/O edges of Usher (NATS, PostgreSQL, Kubernetes, the API emulator)."""
