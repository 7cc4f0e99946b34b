"""The core's model: settings, typed errors, quantities and reasons every other room speaks.

It imports nothing else of the core but the value parsers; it decides nothing.
"""
