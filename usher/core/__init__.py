"""The pure admission core: deterministic decisions with no I/O, clock or randomness."""
