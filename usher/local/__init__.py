"""The one-machine Usher (``usher up``): its servers, its cluster and its services' processes.

What it does: starts NATS JetStream and PostgreSQL from wheels, the Kubernetes API emulator as
a cluster kept on disk, and every service as its own ``python -m usher run`` process; writes
``stack.json`` (usher/adapters/stack_file.py) so that every other command finds them. The CLI
starts it; it starts the services as processes and never imports them.
What it must never do: import a service (services run as processes), or be imported by a
service, the adapters or the core.
"""
