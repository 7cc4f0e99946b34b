"""Alembic migrations of the Usher ledger database (run through ``usher.adapters.pg.migrate``)."""
