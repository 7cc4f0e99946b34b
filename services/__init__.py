"""Usher services: watcher, ledger, dequeuer, preemptor (separate asyncio processes)."""
