"""The preemptor: checks reclaim proposals with the core and has the ledger carry them out."""
