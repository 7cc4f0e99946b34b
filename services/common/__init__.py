"""What every Usher service shares: settings, the process shell, and its projection of the log.

What it does: gives the four services one way to read settings, connect to NATS, stop on
SIGTERM, park poison messages, and fold the log (read by usher/adapters/nats/follower.py) into
a pure-core projection.
What it must never do: hold a service's own logic; the services must not import each other,
only this package.
"""
