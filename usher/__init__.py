"""Usher: an event-sourced, multi-tenant job queue for Kubernetes batch work."""
