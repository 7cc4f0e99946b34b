"""NATS JetStream adapter: stream layout, publishing envelopes, reading the log."""
