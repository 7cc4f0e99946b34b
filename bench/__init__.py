"""Benchmarks of Usher (run with ``make bench``); they print numbers, never pass or fail."""
