"""The embedded one-machine infrastructure: NATS and PostgreSQL servers from wheels."""
