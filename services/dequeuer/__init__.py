"""The dequeuer of one zone: replays the log, runs decision passes, reserves through the ledger."""
